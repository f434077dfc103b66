//! The v2 document in protobuf, as client-go asks for it (`Accept:
//! application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, `DiscoveryClient.OpenAPISchema`, behind
//! `kubectl explain --output plaintext-openapiv2`) and decodes it: with the messages of gnostic's
//! `openapiv2/OpenAPIv2.proto` (github.com/google/gnostic, package `openapi.v2`; the field numbers below are that
//! file's). The JSON document is re-encoded part by part, so both say the same; what kube-openapi's readers need is
//! kept (types, refs, properties, items, required, vendor extensions as YAML text), JSON Schema keys the documents
//! do not use are not.
use serde_json::Value;

/// One message being written: fields appended as they come (protobuf allows any order).
#[derive(Default)]
struct Msg(Vec<u8>);

const VARINT: u64 = 0;
const LEN: u64 = 2;

impl Msg {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u64) {
        self.varint((u64::from(field) << 3) | wire);
    }

    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        self.key(field, LEN);
        self.varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    /// proto3 leaves empty strings and false out.
    fn string(&mut self, field: u32, value: Option<&Value>) {
        if let Some(s) = value.and_then(Value::as_str).filter(|s| !s.is_empty()) {
            self.bytes(field, s.as_bytes());
        }
    }

    fn strings(&mut self, field: u32, value: Option<&Value>) {
        for s in value.and_then(Value::as_array).into_iter().flatten() {
            self.string(field, Some(s));
        }
    }

    fn bool(&mut self, field: u32, value: Option<&Value>) {
        if value.and_then(Value::as_bool) == Some(true) {
            self.key(field, VARINT);
            self.varint(1);
        }
    }

    fn message(&mut self, field: u32, m: Msg) {
        self.bytes(field, &m.0);
    }

    /// A `Named*` pair (`name = 1`, `value = 2`).
    fn named(&mut self, field: u32, name: &str, value: Msg) {
        let mut pair = Msg::default();
        pair.bytes(1, name.as_bytes());
        pair.message(2, value);
        self.message(field, pair);
    }

    /// The `x-` keys of `object` as `repeated NamedAny`, each value an `Any` with its YAML text (`yaml = 2`; JSON
    /// is YAML, and kube-openapi's readers parse it with a YAML parser).
    fn vendor_extensions(&mut self, field: u32, object: &Value) {
        for (name, value) in entries(Some(object)).filter(|(k, _)| k.starts_with("x-")) {
            let mut any = Msg::default();
            any.bytes(2, value.to_string().as_bytes());
            self.named(field, name, any);
        }
    }
}

/// The entries of `value` if it is an object.
fn entries(value: Option<&Value>) -> impl Iterator<Item = (&String, &Value)> {
    value.and_then(Value::as_object).into_iter().flatten()
}

fn array(value: Option<&Value>) -> impl Iterator<Item = &Value> {
    value.and_then(Value::as_array).into_iter().flatten()
}

/// `Schema`.
fn schema(s: &Value) -> Msg {
    let mut m = Msg::default();
    m.string(1, s.get("$ref"));
    m.string(2, s.get("format"));
    m.string(3, s.get("title"));
    m.string(4, s.get("description"));
    m.bool(16, s.get("uniqueItems"));
    m.strings(19, s.get("required"));
    match s.get("additionalProperties") {
        // AdditionalPropertiesItem: schema = 1, boolean = 2.
        Some(Value::Bool(b)) => {
            let mut item = Msg::default();
            item.key(2, VARINT);
            item.varint(u64::from(*b));
            m.message(21, item);
        }
        Some(sub @ Value::Object(_)) => {
            let mut item = Msg::default();
            item.message(1, schema(sub));
            m.message(21, item);
        }
        _ => {}
    }
    // TypeItem: repeated string value = 1 (JSON Schema allows one type or a list).
    if let Some(t) = s.get("type") {
        let mut item = Msg::default();
        item.string(1, Some(t));
        item.strings(1, Some(t));
        m.message(22, item);
    }
    // ItemsItem: repeated Schema schema = 1.
    if let Some(items) = s.get("items") {
        let mut item = Msg::default();
        match items {
            Value::Array(all) => all.iter().for_each(|i| item.message(1, schema(i))),
            one => item.message(1, schema(one)),
        }
        m.message(23, item);
    }
    for sub in array(s.get("allOf")) {
        m.message(24, schema(sub));
    }
    // Properties: repeated NamedSchema additional_properties = 1.
    if s.get("properties").is_some() {
        let mut p = Msg::default();
        for (name, sub) in entries(s.get("properties")) {
            p.named(1, name, schema(sub));
        }
        m.message(25, p);
    }
    m.bool(27, s.get("readOnly"));
    m.vendor_extensions(31, s);
    m
}

/// `ParametersItem` holding a `Parameter`: a `BodyParameter`, or a `NonBodyParameter` of its location.
fn parameter(p: &Value) -> Msg {
    let mut parameter = Msg::default();
    if p.get("in").and_then(Value::as_str) == Some("body") {
        let mut body = Msg::default();
        body.string(1, p.get("description"));
        body.string(2, p.get("name"));
        body.string(3, p.get("in"));
        body.bool(4, p.get("required"));
        if let Some(s) = p.get("schema") {
            body.message(5, schema(s));
        }
        body.vendor_extensions(6, p);
        parameter.message(1, body);
    } else {
        // (NonBodyParameter's field, and type, format, unique_items, vendor_extension in that sub-schema)
        let (field, ty, format, unique, ext) = match p.get("in").and_then(Value::as_str) {
            Some("header") => (1, 5, 6, 19, 22),
            Some("formData") => (2, 6, 7, 20, 23),
            Some("path") => (4, 5, 6, 19, 22),
            _ => (3, 6, 7, 20, 23),
        };
        let mut sub = Msg::default();
        sub.bool(1, p.get("required"));
        sub.string(2, p.get("in"));
        sub.string(3, p.get("description"));
        sub.string(4, p.get("name"));
        sub.string(ty, p.get("type"));
        sub.string(format, p.get("format"));
        sub.bool(unique, p.get("uniqueItems"));
        sub.vendor_extensions(ext, p);
        let mut non_body = Msg::default();
        non_body.message(field, sub);
        parameter.message(2, non_body);
    }
    let mut item = Msg::default();
    item.message(1, parameter);
    item
}

/// `Responses`: `repeated NamedResponseValue response_code = 1`, each a `ResponseValue` holding a `Response`.
fn responses(value: &Value) -> Msg {
    let mut m = Msg::default();
    for (code, r) in entries(Some(value)) {
        let mut response = Msg::default();
        response.string(1, r.get("description"));
        if let Some(s) = r.get("schema") {
            // SchemaItem: schema = 1.
            let mut item = Msg::default();
            item.message(1, schema(s));
            response.message(2, item);
        }
        let mut response_value = Msg::default();
        response_value.message(1, response);
        m.named(1, code, response_value);
    }
    m
}

fn operation(o: &Value) -> Msg {
    let mut m = Msg::default();
    m.strings(1, o.get("tags"));
    m.string(2, o.get("summary"));
    m.string(3, o.get("description"));
    m.string(5, o.get("operationId"));
    m.strings(6, o.get("produces"));
    m.strings(7, o.get("consumes"));
    for p in array(o.get("parameters")) {
        m.message(8, parameter(p));
    }
    if let Some(r) = o.get("responses") {
        m.message(9, responses(r));
    }
    m.strings(10, o.get("schemes"));
    m.vendor_extensions(13, o);
    m
}

fn path_item(item: &Value) -> Msg {
    let mut m = Msg::default();
    for (method, field) in [
        ("get", 2),
        ("put", 3),
        ("post", 4),
        ("delete", 5),
        ("patch", 8),
    ] {
        if let Some(op) = item.get(method) {
            m.message(field, operation(op));
        }
    }
    for p in array(item.get("parameters")) {
        m.message(9, parameter(p));
    }
    m
}

/// The v2 JSON document `doc` as an `openapi.v2.Document`.
pub(super) fn document(d: &Value) -> Vec<u8> {
    let mut m = Msg::default();
    m.string(1, d.get("swagger"));
    let info = &d["info"];
    let mut i = Msg::default();
    i.string(1, info.get("title"));
    i.string(2, info.get("version"));
    m.message(2, i);
    // Paths: repeated NamedPathItem path = 2.
    let mut paths = Msg::default();
    for (path, item) in entries(d.get("paths")) {
        paths.named(2, path, path_item(item));
    }
    m.message(8, paths);
    // Definitions: repeated NamedSchema additional_properties = 1.
    let mut definitions = Msg::default();
    for (name, s) in entries(d.get("definitions")) {
        definitions.named(1, name, schema(s));
    }
    m.message(9, definitions);
    // SecurityRequirement: repeated NamedStringArray additional_properties = 1 (StringArray: value = 1).
    for requirement in array(d.get("security")) {
        let mut r = Msg::default();
        for (name, scopes) in entries(Some(requirement)) {
            let mut array = Msg::default();
            array.strings(1, Some(scopes));
            r.named(1, name, array);
        }
        m.message(12, r);
    }
    // SecurityDefinitions: repeated NamedSecurityDefinitionsItem, each an ApiKeySecurity (= 2).
    let mut security = Msg::default();
    for (name, s) in entries(d.get("securityDefinitions")) {
        let mut api_key = Msg::default();
        api_key.string(1, s.get("type"));
        api_key.string(2, s.get("name"));
        api_key.string(3, s.get("in"));
        api_key.string(4, s.get("description"));
        let mut item = Msg::default();
        item.message(2, api_key);
        security.named(1, name, item);
    }
    m.message(13, security);
    m.0
}

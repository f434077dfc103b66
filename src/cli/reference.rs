//! The book's generated reference pages: every command's help (docs/reference/cli.md) from the clap definitions,
//! and every config key (docs/reference/config-keys.md) from the config's JSON Schema. `tests/it/docs.rs` holds the
//! committed pages to what these print.

use super::conveniences::config_schema;

/// The book's command-line reference (docs/reference/cli.md): every command's full help, as `--help` prints it.
pub fn cli_reference() -> String {
    let mut command = super::command().bin_name("apf-monitor");
    command.build();
    let mut page = String::from(
        "# Command line\n\n<!-- Generated from the CLI's definitions by tests/it/docs.rs \
         (APF_MONITOR_WRITE_DOCS=1 cargo test --test it docs::); edit the doc comments in src/cli/, not this \
         page. -->\n\nEvery command and flag, as `apf-monitor COMMAND --help` prints them. Shell completions and man \
         pages come from the same definitions ([Install](../install.md)).\n",
    );
    fn add(page: &mut String, command: &mut clap::Command, path: &str) {
        // The environment's values left out: the page is the same on every machine.
        let help = command
            .clone()
            .mut_args(|a| a.hide_env_values(true))
            .render_long_help()
            .to_string();
        page.push_str(&format!(
            "\n## `{path}`\n\n```text\n{}\n```\n",
            help.trim_end()
        ));
        let names: Vec<String> = command
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .filter(|n| n != "help")
            .collect();
        for name in names {
            if let Some(sub) = command.find_subcommand_mut(&name) {
                add(page, sub, &format!("{path} {name}"));
            }
        }
    }
    add(&mut page, &mut command, "apf-monitor");
    page
}

/// The book's list of every config key (docs/reference/config-keys.md), from the JSON Schema: its dotted path, its
/// type, its default and its description.
pub fn config_reference() -> String {
    let schema = config_schema();
    let definitions = schema
        .get("definitions")
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    let mut rows = Vec::new();
    keys(&schema, &definitions, "", &mut rows, 0);
    let mut page = String::from(
        "# Every config key\n\n<!-- Generated from the settings types by tests/it/docs.rs \
         (APF_MONITOR_WRITE_DOCS=1 cargo test --test it docs::); edit their doc comments, not this page. -->\n\n\
         Every key of the config file, from its [JSON Schema](configuration.md) (`apf-monitor config schema`). \
         `config/apf-monitor.example.yaml` shows them in place, with examples. Durations are written `5s`, `1m`, \
         `1m30s`.\n\n| key | type | default | what it does |\n|---|---|---|---|\n",
    );
    for (key, kind, default, description) in rows {
        page.push_str(&format!(
            "| `{key}` | {kind} | {default} | {} |\n",
            description.replace('\n', " ").replace('|', "\\|")
        ));
    }
    page
}

/// The definition `s` refers to (`$ref`, or a one-element `allOf` of one), by name.
fn reference(s: &serde_json::Value) -> Option<&str> {
    s.get("$ref")
        .or_else(|| {
            s.get("allOf")
                .and_then(|a| a.as_array())
                .filter(|a| a.len() == 1)
                .and_then(|a| a[0].get("$ref"))
        })
        .and_then(|r| r.as_str())
        .and_then(|r| r.strip_prefix("#/definitions/"))
}

/// The schema `s` with its reference resolved, and an optional value (`anyOf` of it and null) as the value.
fn resolved<'a>(
    s: &'a serde_json::Value,
    definitions: &'a serde_json::Value,
) -> &'a serde_json::Value {
    if let Some(name) = reference(s) {
        return definitions.get(name).unwrap_or(s);
    }
    let options = s.get("anyOf").and_then(|a| a.as_array());
    let mut values = options
        .into_iter()
        .flatten()
        .filter(|o| o.get("type").and_then(|t| t.as_str()) != Some("null"));
    match (values.next(), values.next()) {
        (Some(only), None) if reference(only).is_some() => resolved(only, definitions),
        _ => s,
    }
}

/// What a key's type is called in the table: the value types of `values.rs` by the names their schemas carry, enums
/// spelled out, an optional value as the value.
fn kind_of(s: &serde_json::Value, definitions: &serde_json::Value) -> String {
    match reference(s) {
        Some("Duration" | "Interval") => return "duration".into(),
        Some("ByteCount") => return "byte count".into(),
        Some("TargetUrl") => return "URL".into(),
        Some(_) => return kind_of(resolved(s, definitions), definitions),
        None => {}
    }
    if let Some(values) = s.get("enum").and_then(|e| e.as_array()) {
        let names: Vec<String> = values
            .iter()
            .map(|v| format!("`{}`", v.as_str().unwrap_or("?")))
            .collect();
        return format!("one of {}", names.join(", "));
    }
    if let Some(one_of) = s
        .get("oneOf")
        .or_else(|| s.get("anyOf"))
        .and_then(|o| o.as_array())
    {
        let consts: Vec<String> = one_of
            .iter()
            .filter_map(|k| k.get("const")?.as_str().map(|c| format!("`{c}`")))
            .collect();
        if consts.len() == one_of.len() {
            return format!("one of {}", consts.join(", "));
        }
        let kinds: Vec<String> = one_of
            .iter()
            .map(|k| kind_of(k, definitions))
            .filter(|k| k != "null" && !k.is_empty())
            .collect();
        return kinds.join(" or ");
    }
    match s.get("type") {
        Some(serde_json::Value::String(t)) => t.to_string(),
        Some(serde_json::Value::Array(types)) => types
            .iter()
            .filter_map(|t| t.as_str())
            .filter(|t| *t != "null")
            .collect::<Vec<_>>()
            .join(" or "),
        _ => String::new(),
    }
}

fn keys(
    s: &serde_json::Value,
    definitions: &serde_json::Value,
    path: &str,
    rows: &mut Vec<(String, String, String, String)>,
    depth: usize,
) {
    let s = resolved(s, definitions);
    let Some(properties) = s.get("properties").and_then(|p| p.as_object()) else {
        return;
    };
    for (name, property) in properties {
        let key = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        let target = resolved(property, definitions);
        let description = property
            .get("description")
            .or_else(|| target.get("description"))
            .and_then(|d| d.as_str())
            .unwrap_or("")
            .to_string();
        let default = match property.get("default") {
            None | Some(serde_json::Value::Null) => String::new(),
            Some(d) => format!("`{d}`"),
        };
        let item = target.get("items").map(|i| resolved(i, definitions));
        let nested = item.filter(|i| i.get("properties").is_some());
        let kind = match (target.get("type").and_then(|t| t.as_str()), item) {
            (Some("array"), Some(_)) if nested.is_some() => "list of objects".to_string(),
            (Some("array"), Some(i)) => format!("list of {}", kind_of(i, definitions)),
            (Some("object"), _) if target.get("properties").is_some() => "object".to_string(),
            _ => kind_of(property, definitions),
        };
        rows.push((key.clone(), kind, default, description));
        if depth < 6 {
            match nested {
                Some(i) => keys(i, definitions, &format!("{key}[]"), rows, depth + 1),
                None => keys(target, definitions, &key, rows, depth + 1),
            }
        }
    }
}

//! The simulated cluster's object store: what etcd is to kube-apiserver. Every replica reads and writes this one
//! store, so any replica answers for the cluster, and one revision counter orders every change: an object's
//! `metadata.resourceVersion` is the revision of its last change, a list's is the revision it was read at, and a
//! watch from revision R sees exactly the changes after R (Kubernetes API Concepts, "Resource versions" and
//! "Efficient detection of changes").

use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::broadcast;

/// How many past changes a watch can start from; an older revision gets 410 Gone, as after etcd compaction.
const HISTORY: usize = 1000;
/// Changes a slow watcher may fall behind before its watch is ended (the client re-lists, as after any drop).
const WATCH_BUFFER: usize = 1024;

/// One API resource in one API version: `("discovery.k8s.io", "v1", "endpointslices")`; the core group is "".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Gvr {
    pub group: &'static str,
    pub version: &'static str,
    pub resource: &'static str,
}

/// Where an object lives: its resource, its namespace ("" for cluster-scoped objects) and its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct ObjectKey {
    pub gvr: Gvr,
    pub namespace: String,
    pub name: String,
}

/// ADDED, MODIFIED or DELETED, as a watch event's `type` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change: the object after it (for DELETED, as it was, at the deletion's revision) and before it.
#[derive(Debug, Clone)]
pub(super) struct Change {
    pub kind: EventType,
    pub key: ObjectKey,
    pub revision: u64,
    pub object: Value,
    pub previous: Option<Value>,
}

/// Why a write was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum StoreError {
    #[error("already exists")]
    AlreadyExists,
    #[error("not found")]
    NotFound,
}

/// Where a watch starts: the revision it was asked from and the changes it must replay.
pub(super) struct WatchStart {
    /// Synthetic ADDED changes (no revision given: the current state) or the recorded changes after the revision.
    pub replay: Vec<Arc<Change>>,
    pub live: broadcast::Receiver<Arc<Change>>,
}

/// A revision older than the store's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too old resource version: {asked} ({oldest})")]
pub(super) struct Gone {
    pub asked: u64,
    pub oldest: u64,
}

struct Inner {
    revision: u64,
    objects: BTreeMap<ObjectKey, Value>,
    history: VecDeque<Arc<Change>>,
    events: broadcast::Sender<Arc<Change>>,
}

/// The shared store; clones are handles to the same objects.
#[derive(Clone)]
pub(super) struct Store {
    inner: Arc<Mutex<Inner>>,
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

fn set_revision(object: &mut Value, revision: u64) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), json!(revision.to_string()));
    }
}

impl Store {
    pub fn new() -> Self {
        let (events, _) = broadcast::channel(WATCH_BUFFER);
        Store {
            inner: Arc::new(Mutex::new(Inner {
                revision: 1,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                events,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every write leaves the map consistent before it can panic; keep serving.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current revision: what a list returned now is consistent with.
    #[cfg(test)]
    pub fn revision(&self) -> u64 {
        self.lock().revision
    }

    /// The objects of `gvr` in `namespace` (every namespace when `None`), by namespace and name, and the revision.
    pub fn list(&self, gvr: Gvr, namespace: Option<&str>) -> (Vec<Value>, u64) {
        let inner = self.lock();
        let items = inner
            .objects
            .iter()
            .filter(|(k, _)| k.gvr == gvr && namespace.is_none_or(|ns| k.namespace == ns))
            .map(|(_, v)| v.clone())
            .collect();
        (items, inner.revision)
    }

    pub fn get(&self, key: &ObjectKey) -> Option<Value> {
        self.lock().objects.get(key).cloned()
    }

    /// Adds a new object; refused when one of that name exists.
    pub fn create(&self, key: ObjectKey, object: Value) -> Result<Value, StoreError> {
        let mut inner = self.lock();
        if inner.objects.contains_key(&key) {
            return Err(StoreError::AlreadyExists);
        }
        Ok(inner.commit(EventType::Added, key, object, None))
    }

    /// Creates or replaces an object the cluster itself maintains (the `kubernetes` Endpoints and EndpointSlices).
    /// A replacement keeps the object's creation time, as an update does; an unchanged object is left alone: no new
    /// revision, no event.
    pub fn put(&self, key: ObjectKey, mut object: Value) -> Value {
        let mut inner = self.lock();
        match inner.objects.get(&key).cloned() {
            None => inner.commit(EventType::Added, key, object, None),
            Some(old) => {
                // The creation time stays; the revision changes on every write, so it is compared without.
                if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                    for field in ["creationTimestamp", "resourceVersion"] {
                        if let Some(v) = old["metadata"].get(field) {
                            meta.insert(field.into(), v.clone());
                        }
                    }
                }
                if old == object {
                    return old;
                }
                inner.commit(EventType::Modified, key, object, Some(old))
            }
        }
    }

    /// Writes `key` atomically: `edit` sees the stored object (`None` when there is none) and returns the new one,
    /// or refuses with its own error. Returns the stored object and whether it was created.
    pub fn write<E>(
        &self,
        key: &ObjectKey,
        edit: impl FnOnce(Option<&Value>) -> Result<Value, E>,
    ) -> Result<(Value, bool), E> {
        let mut inner = self.lock();
        let old = inner.objects.get(key).cloned();
        let new = edit(old.as_ref())?;
        Ok(match old {
            Some(old) => (
                inner.commit(EventType::Modified, key.clone(), new, Some(old)),
                false,
            ),
            None => (inner.commit(EventType::Added, key.clone(), new, None), true),
        })
    }

    pub fn delete(&self, key: &ObjectKey) -> Result<Value, StoreError> {
        let mut inner = self.lock();
        let old = inner
            .objects
            .get(key)
            .cloned()
            .ok_or(StoreError::NotFound)?;
        Ok(inner.commit(EventType::Deleted, key.clone(), old.clone(), Some(old)))
    }

    /// Every change from now on, without a replay (for a reader that reads the current state itself, after
    /// subscribing, so that no change falls between the two).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.lock().events.subscribe()
    }

    /// Starts a watch on the objects `filter` accepts. Without a revision (or "0") it replays the current state as
    /// ADDED, as kube-apiserver does; from revision R it replays the recorded changes after R. The replay and the
    /// subscription are taken under one lock, so no change falls between them.
    pub fn watch(
        &self,
        from: Option<u64>,
        filter: impl Fn(&ObjectKey) -> bool,
    ) -> Result<WatchStart, Gone> {
        let inner = self.lock();
        let replay = match from {
            None | Some(0) => inner
                .objects
                .iter()
                .filter(|(k, _)| filter(k))
                .map(|(k, v)| {
                    Arc::new(Change {
                        kind: EventType::Added,
                        key: k.clone(),
                        revision: inner.revision,
                        object: v.clone(),
                        previous: None,
                    })
                })
                .collect(),
            Some(rev) => {
                let oldest = inner
                    .history
                    .front()
                    .map(|c| c.revision)
                    .unwrap_or(inner.revision + 1);
                // Every change after `rev` must still be recorded.
                if rev + 1 < oldest && rev < inner.revision {
                    return Err(Gone { asked: rev, oldest });
                }
                inner
                    .history
                    .iter()
                    .filter(|c| c.revision > rev && filter(&c.key))
                    .cloned()
                    .collect()
            }
        };
        Ok(WatchStart {
            replay,
            live: inner.events.subscribe(),
        })
    }
}

impl Inner {
    fn commit(
        &mut self,
        kind: EventType,
        key: ObjectKey,
        mut object: Value,
        previous: Option<Value>,
    ) -> Value {
        self.revision += 1;
        let revision = self.revision;
        set_revision(&mut object, revision);
        match kind {
            EventType::Deleted => {
                self.objects.remove(&key);
            }
            EventType::Added | EventType::Modified => {
                self.objects.insert(key.clone(), object.clone());
            }
        }
        let change = Arc::new(Change {
            kind,
            key,
            revision,
            object: object.clone(),
            previous,
        });
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(change.clone());
        // No receiver is not an error: nobody watches.
        let _ = self.events.send(change);
        object
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASES: Gvr = Gvr {
        group: "coordination.k8s.io",
        version: "v1",
        resource: "leases",
    };

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            gvr: LEASES,
            namespace: "default".into(),
            name: name.into(),
        }
    }

    fn obj(name: &str, holder: &str) -> Value {
        json!({"metadata": {"name": name}, "spec": {"holderIdentity": holder}})
    }

    #[test]
    fn revisions_increase_and_lists_carry_them() {
        let s = Store::new();
        let a = s.create(key("a"), obj("a", "x")).unwrap();
        let b = s.create(key("b"), obj("b", "x")).unwrap();
        let ra: u64 = a["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let rb: u64 = b["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(rb > ra);
        assert_eq!(
            s.create(key("a"), obj("a", "y")),
            Err(StoreError::AlreadyExists)
        );
        let (items, rev) = s.list(LEASES, Some("default"));
        assert_eq!((items.len(), rev), (2, rb));
        assert!(s.list(LEASES, Some("other")).0.is_empty());
        let (a2, created) = s
            .write(&key("a"), |old| {
                assert!(old.is_some());
                Ok::<_, StoreError>(obj("a", "z"))
            })
            .unwrap();
        assert!(!created);
        assert_eq!(a2["metadata"]["resourceVersion"], (rb + 1).to_string());
        let refused = s.write(&key("c"), |old| match old {
            Some(o) => Ok(o.clone()),
            None => Err(StoreError::NotFound),
        });
        assert_eq!(refused, Err(StoreError::NotFound));
        let (_, created) = s
            .write(&key("c"), |_| Ok::<_, StoreError>(obj("c", "x")))
            .unwrap();
        assert!(created);
    }

    #[test]
    fn put_of_an_unchanged_object_is_no_change() {
        let s = Store::new();
        s.put(key("a"), obj("a", "x"));
        let rev = s.revision();
        s.put(key("a"), obj("a", "x"));
        assert_eq!(s.revision(), rev);
        s.put(key("a"), obj("a", "y"));
        assert_eq!(s.revision(), rev + 1);
        // A rewrite a second later, its creation time now: the same object, created when it was first.
        let at = |object: Value, t: &str| {
            let mut o = object;
            o["metadata"]["creationTimestamp"] = json!(t);
            o
        };
        s.put(key("b"), at(obj("b", "x"), "2026-01-01T00:00:00Z"));
        let rev = s.revision();
        s.put(key("b"), at(obj("b", "x"), "2026-01-01T00:00:01Z"));
        assert_eq!(
            s.revision(),
            rev,
            "only the creation time differs: no change"
        );
        let b = s.put(key("b"), at(obj("b", "y"), "2026-01-01T00:00:02Z"));
        assert_eq!(s.revision(), rev + 1);
        assert_eq!(b["metadata"]["creationTimestamp"], "2026-01-01T00:00:00Z");
    }

    #[tokio::test]
    async fn watches_replay_then_follow() {
        let s = Store::new();
        s.create(key("a"), obj("a", "x")).unwrap();
        let from = s.revision();
        s.create(key("b"), obj("b", "x")).unwrap();
        // From now: the current state as ADDED.
        let w = s.watch(None, |_| true).unwrap();
        assert_eq!(w.replay.len(), 2);
        assert!(w.replay.iter().all(|c| c.kind == EventType::Added));
        // From a revision: only what changed after it.
        let mut w = s.watch(Some(from), |k| k.name == "b").unwrap();
        assert_eq!(w.replay.len(), 1);
        assert_eq!(w.replay[0].key.name, "b");
        s.delete(&key("b")).unwrap();
        let c = w.live.recv().await.unwrap();
        assert_eq!((c.kind, c.key.name.as_str()), (EventType::Deleted, "b"));
    }

    #[test]
    fn a_revision_older_than_the_history_is_gone() {
        let s = Store::new();
        for i in 0..HISTORY + 5 {
            s.put(key("a"), obj("a", &i.to_string()));
        }
        assert!(s.watch(Some(1), |_| true).is_err());
        assert!(s.watch(Some(s.revision()), |_| true).is_ok());
    }
}

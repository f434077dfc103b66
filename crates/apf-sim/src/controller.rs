//! The replica's APF configuration controller: it watches the cluster's FlowSchemas and
//! PriorityLevelConfigurations and puts them in force in the replica's simulator whenever they change, as
//! kube-apiserver's does (k8s.io/apiserver `pkg/util/flowcontrol/apf_controller.go`: an informer on both kinds, each
//! change digested into the priority levels and the matching order).
use super::objects;
use super::simulator::Simulator;
use super::store::Store;
use apf::KubeVersion;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Keeps `sim` on the configuration in `store` until `stop` is cancelled.
pub(super) fn spawn(
    store: Store,
    version: KubeVersion,
    sim: Simulator,
    stop: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let Some((fs, plc)) = objects::preferred_flowcontrol(version) else {
            return;
        };
        // Subscribed before the first read: a change in between is seen again, never missed.
        let mut changes = store.subscribe();
        apply(&store, version, &sim);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                change = changes.recv() => match change {
                    Ok(c) if c.key.gvr == fs || c.key.gvr == plc => {
                        // One digest for a burst (`kubectl apply` of a level and its schema).
                        while !changes.is_empty() {
                            if let Err(TryRecvError::Closed) = changes.try_recv() {
                                break;
                            }
                        }
                        apply(&store, version, &sim);
                    }
                    Ok(_) => {}
                    // Too far behind to know what changed: read it all again.
                    Err(RecvError::Lagged(_)) => apply(&store, version, &sim),
                    Err(RecvError::Closed) => return,
                },
            }
        }
    })
}

fn apply(store: &Store, version: KubeVersion, sim: &Simulator) {
    let (schemas, levels) = objects::configuration(store, version);
    tracing::debug!(
        flow_schemas = schemas.len(),
        priority_levels = levels.len(),
        "APF configuration in force"
    );
    sim.configure(schemas, levels);
}

#[cfg(test)]
mod tests {
    use crate::scenario::ScenarioSource;
    use crate::simulator::tests::sim;
    use std::time::Duration;

    /// Polls `check` for up to 10 s.
    async fn eventually(mut check: impl FnMut() -> bool) -> bool {
        for _ in 0..200 {
            if check() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    #[tokio::test]
    async fn objects_written_through_the_api_reach_the_simulation() {
        let s = sim(34, ScenarioSource::Storm, 1);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!(
            "http://{}/apis/flowcontrol.apiserver.k8s.io/v1",
            listener.local_addr().unwrap()
        );
        let server = tokio::spawn(crate::serve(listener, s.clone()));
        let client = reqwest::Client::new();
        let plc = r#"{"metadata":{"name":"lists"},"spec":{"type":"Limited","limited":{"nominalConcurrencyShares":5,
            "limitResponse":{"type":"Reject"}}}}"#;
        let resp = client
            .post(format!("{base}/prioritylevelconfigurations"))
            .body(plc)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        let has = |name: &str| s.truth().iter().any(|l| l.priority_level == name);
        assert!(
            eventually(|| has("lists")).await,
            "the new level is in force"
        );
        let fs = r#"{"metadata":{"name":"lists"},"spec":{"priorityLevelConfiguration":{"name":"lists"},
            "matchingPrecedence":100,"rules":[{"subjects":[{"kind":"Group","group":{"name":"system:serviceaccounts"}}],
            "resourceRules":[{"verbs":["list"],"apiGroups":["*"],"resources":["*"],"clusterScope":true,"namespaces":["*"]}]}]}}"#;
        let resp = client
            .post(format!("{base}/flowschemas"))
            .body(fs)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        let agents_in = |level: &str| {
            let st = s.lock();
            let f = st.flows.iter().find(|f| f.name == "agents").unwrap();
            f.level.is_some_and(|l| st.levels[l].def.name == level)
        };
        assert!(
            eventually(|| agents_in("lists")).await,
            "the flows are matched again"
        );
        let resp = client
            .delete(format!("{base}/prioritylevelconfigurations/lists"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        // The schema dangles: kube-apiserver skips it, and the agents are back where they were.
        assert!(eventually(|| agents_in("workload-low")).await);
        server.abort();
    }
}

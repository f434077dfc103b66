//! TEMPORARY STUB of the simulated kube-apiserver (the real one is merged from the sim branch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubeVersion {
    pub minor: u32,
    pub patch: u32,
}
impl std::str::FromStr for KubeVersion {
    type Err = String;
    fn from_str(_s: &str) -> Result<Self, String> {
        Ok(KubeVersion {
            minor: 34,
            patch: 0,
        })
    }
}
pub enum ScenarioSource {
    Idle,
}
impl std::str::FromStr for ScenarioSource {
    type Err = String;
    fn from_str(_s: &str) -> Result<Self, String> {
        Ok(ScenarioSource::Idle)
    }
}
pub struct Scenario;
impl Scenario {
    pub fn load(_s: &ScenarioSource) -> Result<Scenario, String> {
        Ok(Scenario)
    }
}
pub struct SimOptions {
    pub version: KubeVersion,
    pub scenario: Scenario,
    pub seed: u64,
    pub server_concurrency: u32,
}
#[derive(Clone)]
pub struct Simulator;
impl Simulator {
    pub fn new(_o: SimOptions) -> Self {
        Simulator
    }
    pub fn spawn_clock(&self, _t: std::time::Duration) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async {})
    }
}
pub async fn serve(_l: tokio::net::TcpListener, _s: Simulator) -> std::io::Result<()> {
    Ok(())
}

//! The CRI client: kubelet's side of the `runtime.v1` gRPC API (the `k8s-cri` crate) over
//! containerd's unix socket, with blocking wrappers so tests read top to bottom.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::*;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Response, Status};

/// No CRI call of these tests takes this long unless something hangs.
const CALL_TIMEOUT: Duration = Duration::from_secs(90);

pub struct Client {
    rt: tokio::runtime::Runtime,
    svc: RuntimeServiceClient<Channel>,
}

impl Client {
    /// A channel whose connector dials the unix socket (the URI is a placeholder tonic needs).
    /// Fails while the socket exists but nothing listens yet.
    pub fn connect(sock: &Path) -> Result<Client, tonic::transport::Error> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
        let sock: PathBuf = sock.to_path_buf();
        let channel = rt.block_on(async move {
            Endpoint::try_from("http://[::]:0")
                .expect("endpoint")
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let sock = sock.clone();
                    async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(sock).await?)) }
                }))
                .await
        });
        Ok(Client { svc: RuntimeServiceClient::new(channel?), rt })
    }

    fn block<T>(&self, call: impl Future<Output = Result<Response<T>, Status>>) -> Result<T, Status> {
        let res = self.rt.block_on(async { tokio::time::timeout(CALL_TIMEOUT, call).await });
        res.map_err(|_| Status::deadline_exceeded(format!("no answer within {CALL_TIMEOUT:?}")))?
            .map(Response::into_inner)
    }

    fn svc(&self) -> RuntimeServiceClient<Channel> {
        self.svc.clone()
    }

    pub fn status(&self) -> Result<StatusResponse, Status> {
        self.block(self.svc().status(StatusRequest { verbose: false }))
    }

    pub fn run_pod(&self, config: PodSandboxConfig, handler: &str) -> Result<String, Status> {
        let req = RunPodSandboxRequest { config: Some(config), runtime_handler: handler.to_string() };
        self.block(self.svc().run_pod_sandbox(req)).map(|r| r.pod_sandbox_id)
    }

    pub fn pod_status(&self, id: &str) -> Result<PodSandboxStatusResponse, Status> {
        self.block(self.svc().pod_sandbox_status(PodSandboxStatusRequest { pod_sandbox_id: id.into(), verbose: true }))
    }

    pub fn stop_pod(&self, id: &str) -> Result<(), Status> {
        self.block(self.svc().stop_pod_sandbox(StopPodSandboxRequest { pod_sandbox_id: id.into() })).map(drop)
    }

    pub fn remove_pod(&self, id: &str) -> Result<(), Status> {
        self.block(self.svc().remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id.into() })).map(drop)
    }

    pub fn list_pods(&self) -> Result<Vec<PodSandbox>, Status> {
        self.block(self.svc().list_pod_sandbox(ListPodSandboxRequest { filter: None })).map(|r| r.items)
    }

    pub fn create(&self, pod: &str, config: ContainerConfig, pod_config: &PodSandboxConfig) -> Result<String, Status> {
        let req = CreateContainerRequest {
            pod_sandbox_id: pod.into(),
            config: Some(config),
            sandbox_config: Some(pod_config.clone()),
        };
        self.block(self.svc().create_container(req)).map(|r| r.container_id)
    }

    pub fn start(&self, id: &str) -> Result<(), Status> {
        self.block(self.svc().start_container(StartContainerRequest { container_id: id.into() })).map(drop)
    }

    pub fn stop(&self, id: &str, timeout_secs: i64) -> Result<(), Status> {
        let req = StopContainerRequest { container_id: id.into(), timeout: timeout_secs };
        self.block(self.svc().stop_container(req)).map(drop)
    }

    pub fn remove(&self, id: &str) -> Result<(), Status> {
        self.block(self.svc().remove_container(RemoveContainerRequest { container_id: id.into() })).map(drop)
    }

    pub fn list(&self) -> Result<Vec<Container>, Status> {
        self.block(self.svc().list_containers(ListContainersRequest { filter: None })).map(|r| r.containers)
    }

    pub fn container_status(&self, id: &str) -> Result<ContainerStatusResponse, Status> {
        self.block(self.svc().container_status(ContainerStatusRequest { container_id: id.into(), verbose: true }))
    }

    pub fn exec_sync(&self, id: &str, cmd: &[&str], timeout_secs: i64) -> Result<ExecSyncResponse, Status> {
        let req = ExecSyncRequest {
            container_id: id.into(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            timeout: timeout_secs,
        };
        self.block(self.svc().exec_sync(req))
    }

    pub fn update(&self, id: &str, linux: LinuxContainerResources) -> Result<(), Status> {
        let req = UpdateContainerResourcesRequest { container_id: id.into(), linux: Some(linux), ..Default::default() };
        self.block(self.svc().update_container_resources(req)).map(drop)
    }

    pub fn stats(&self, id: &str) -> Result<ContainerStats, Status> {
        let res = self.block(self.svc().container_stats(ContainerStatsRequest { container_id: id.into() }));
        res?.stats.ok_or_else(|| Status::not_found("ContainerStats answered without stats"))
    }
}

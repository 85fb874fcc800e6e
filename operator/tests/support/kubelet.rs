//! Plays the kubelet and the Job controller for the operator's Jobs with a real container engine:
//! the pod spec the operator created is read from the API server and run with `docker run`, and
//! the container's real exit code, termination message and reason go back into the Pod's and the
//! Job's status.
//!
//! What is emulated, from the Job's pod template:
//! - the image (it must be in the engine already: nothing is pulled), `command` as the entrypoint
//!   and `args`, with Kubernetes' `$(VAR)` expansion from the container's environment;
//! - `env` with `value` and `valueFrom.secretKeyRef` (read from the API server; a missing Secret or
//!   key fails as the kubelet's `CreateContainerConfigError` would), passed through an env file so
//!   no value appears in an argument list;
//! - the security context, container over pod: `runAsUser`/`runAsGroup` (`--user`), `fsGroup` and
//!   `supplementalGroups` (`--group-add`), `runAsNonRoot` (refused for uid 0, as the kubelet does),
//!   `readOnlyRootFilesystem` (`--read-only`), `capabilities.drop`/`add` (`--cap-drop`/`--cap-add`),
//!   `privileged`, `allowPrivilegeEscalation: false` (`no-new-privileges`), `seccompProfile`
//!   (`RuntimeDefault` is the engine's default profile; no profile means `Unconfined`, Kubernetes'
//!   default);
//! - volumes: Secret volumes as files with their items, `defaultMode`/`mode`, owned by root and
//!   `fsGroup`, mounted read-only; `emptyDir`s as fresh folders of mode 0777; PersistentVolumeClaims
//!   as host folders the test registers ([`Kubelet::claim`]), mounted read-only where the mount or
//!   the volume says so, with `subPath`;
//! - `terminationMessagePath` (a host file of mode 0666, as the kubelet makes it; messages cut at
//!   4096 bytes) and `terminationMessagePolicy: FallbackToLogsOnError`;
//! - `resources.limits.memory` (`--memory`, without swap): an OOM kill is reported `OOMKilled`;
//! - the Job's `activeDeadlineSeconds` from the Job's start: the containers are stopped (SIGTERM,
//!   then SIGKILL after `terminationGracePeriodSeconds`, all at once), the pod deleted, the Job
//!   `Failed` with reason `DeadlineExceeded`; `backoffLimit: 0` (one pod; a failed pod fails the
//!   Job with `BackoffLimitExceeded`);
//! - init containers, one after the other, each to its end (a failed one fails the pod, and no
//!   container starts); then every container, started in order, sharing the pod's `emptyDir`s
//!   (one host folder each, so FIFOs and `flock`s work across them, as on a node); the pod
//!   ends when all have ended, `Failed` when any exited non-zero. Each container has its own
//!   environment and termination message.
//!
//! What it does not emulate: scheduling (node selectors, affinity, tolerations, priority),
//! `imagePullPolicy`, pod networking (containers share the host's loopback network, so Service
//! names do not resolve and `hostname` cannot be set: the engine refuses a host name with the host
//! network, so the container sees the machine's), CPU requests and limits, ephemeral storage,
//! `emptyDir.medium`/`sizeLimit`, the atomic `..data` layout and tmpfs of Secret volumes, the
//! ownership change `fsGroup` makes on writable volumes, ConfigMaps, projected and downward-API
//! volumes (refused), sidecar containers (`restartPolicy: Always` init containers), restarts,
//! probes, SELinux, AppArmor and user namespaces.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaim, Pod, PodSecurityContext, PodSpec, Secret, Volume,
};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

/// The kubelet truncates termination messages to this many bytes.
const TERMINATION_MESSAGE_LIMIT: usize = 4096;
/// The container whose end is the pod's, when the pod has several.
const SIDECAR: &str = "sidecar";
/// How often the container's state is read.
const POLL: Duration = Duration::from_millis(200);

/// Whether a container engine answers and holds `images`; `false` (after a recorded skip) skips
/// the test, except where every test must run, where a missing engine or image fails it.
pub fn engine_or_skip(images: &[&str]) -> bool {
    let answers = docker(&["version", "--format", "{{.Server.Version}}"])
        .status
        .success();
    neverwiped_testkit::require_that(
        answers,
        "no container engine answers `docker version`",
        "start dockerd (scripts/test.sh does)",
    ) && images.iter().all(|image| {
        neverwiped_testkit::require_that(
            docker(&["image", "inspect", image]).status.success(),
            format_args!("the image {image} is missing"),
            "run scripts/build-images.sh (scripts/test.sh does)",
        )
    })
}

/// Runs `docker` with `args`; its output whatever its exit status.
pub fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .unwrap_or_else(|error| Output {
            status: std::os::unix::process::ExitStatusExt::from_raw(127 << 8),
            stdout: Vec::new(),
            stderr: format!("docker does not start: {error}").into_bytes(),
        })
}

/// Runs `docker` with `args` and returns its standard output; panics with its error on failure.
pub fn docker_ok(args: &[&str]) -> String {
    let output = docker(args);
    assert!(
        output.status.success(),
        "docker {} failed: {}",
        args.first().copied().unwrap_or(""),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// How the Job's one pod ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// The container exited by itself (or was killed by the kernel).
    Exited {
        exit_code: i32,
        /// `Completed`, `Error` or `OOMKilled`, as the kubelet reports it.
        reason: String,
        message: String,
    },
    /// The Job outlived `activeDeadlineSeconds`: stopped, its pod deleted.
    DeadlineExceeded { exit_code: i32 },
}

/// One container's run: how it ended, its logs, and the `docker run` options its spec became.
#[derive(Debug, Clone)]
pub struct ContainerRun {
    pub name: String,
    pub ending: Ending,
    pub logs: String,
    /// The `docker run` options the container's spec became (no values of the environment).
    pub run_options: Vec<String>,
}

/// One pod run: how its main container (`sidecar`, or the only one) ended, and its logs.
#[derive(Debug, Clone)]
pub struct PodRun {
    pub ending: Ending,
    pub logs: String,
    /// The `docker run` options the pod spec became (no values of the environment).
    pub run_options: Vec<String>,
    /// Every container that ran, init containers first, the main one included.
    pub containers: Vec<ContainerRun>,
}

impl PodRun {
    /// The run of the container `name`; panics with the names when the pod had none such.
    pub fn container(&self, name: &str) -> &ContainerRun {
        self.containers
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| {
                let names: Vec<&str> = self.containers.iter().map(|c| c.name.as_str()).collect();
                panic!("the pod ran no container {name}; it ran {names:?}")
            })
    }
}

/// The kubelet of one namespace.
pub struct Kubelet {
    client: Client,
    namespace: String,
    claims: BTreeMap<String, PathBuf>,
    work: PathBuf,
    containers: Vec<String>,
}

/// A pod being run: where its files are, and when it must stop.
struct RunningPod {
    name: String,
    dir: PathBuf,
    deadline: Option<Instant>,
    grace: i64,
}

impl Kubelet {
    pub fn new(client: Client, namespace: &str) -> Kubelet {
        // One folder per kubelet: a test may play several nodes.
        static KUBELETS: AtomicUsize = AtomicUsize::new(0);
        let index = KUBELETS.fetch_add(1, Ordering::Relaxed);
        let work = std::env::temp_dir().join(format!("neverwiped-kubelet-{namespace}-{index}"));
        std::fs::create_dir_all(&work).expect("the kubelet's folder");
        Kubelet {
            client,
            namespace: namespace.to_owned(),
            claims: BTreeMap::new(),
            work,
            containers: Vec::new(),
        }
    }

    /// Makes `folder` the volume of the claim `name` (the PV a provisioner would have bound).
    pub fn claim(&mut self, name: &str, folder: &Path) {
        self.claims.insert(name.to_owned(), folder.to_owned());
    }

    /// Runs the Job `job_name`'s pod to its end and writes the statuses; returns how it ended.
    /// Init containers run one after the other, each to its end; a failed one fails the pod.
    /// Then every container starts, in order, and the pod ends when all have ended.
    pub async fn run_job(&mut self, job_name: &str) -> PodRun {
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), &self.namespace);
        let job = jobs.get(job_name).await.expect("the Job exists");
        let job_spec = job.spec.clone().expect("a Job spec");
        assert_eq!(
            job_spec.backoff_limit.unwrap_or(6),
            0,
            "this kubelet runs one pod per Job: backoffLimit must be 0"
        );
        let pod_spec = job_spec.template.spec.clone().expect("a pod template");
        let started = jiff::Timestamp::now();
        let name = self.create_pod(&job, &pod_spec, started).await;
        set_job_status(
            &jobs,
            job_name,
            json!({"startTime": started.to_string(), "active": 1}),
        )
        .await;
        let pod = RunningPod {
            dir: self.work.join(&name),
            name,
            deadline: job_spec
                .active_deadline_seconds
                .map(|secs| Instant::now() + Duration::from_secs(secs as u64)),
            grace: pod_spec.termination_grace_period_seconds.unwrap_or(30),
        };
        std::fs::create_dir_all(&pod.dir).expect("the pod's folder");
        let mut runs = Vec::new();
        for init in pod_spec.init_containers.iter().flatten() {
            let started = self.start_containers(&pod_spec, &pod, [init]).await;
            let ends = wait_for_exit(&started, pod.deadline, pod.grace).await;
            runs.extend(ended_runs(&pod, [init], started, &ends));
            if ends[0].exit_code != 0 || ends[0].deadline_exceeded {
                return self.end_pod(&jobs, job_name, &pod, &pod_spec, runs).await;
            }
        }
        let started_containers = self
            .start_containers(&pod_spec, &pod, &pod_spec.containers)
            .await;
        self.set_pod_running(&pod.name, &pod_spec.containers, started)
            .await;
        let ends = wait_for_exit(&started_containers, pod.deadline, pod.grace).await;
        runs.extend(ended_runs(
            &pod,
            &pod_spec.containers,
            started_containers,
            &ends,
        ));
        self.end_pod(&jobs, job_name, &pod, &pod_spec, runs).await
    }

    /// Starts `containers` of the pod, detached; their engine names and `docker run` options.
    async fn start_containers<'a>(
        &mut self,
        pod_spec: &PodSpec,
        pod: &RunningPod,
        containers: impl IntoIterator<Item = &'a Container>,
    ) -> Vec<(String, Vec<String>)> {
        let mut started = Vec::new();
        for container in containers {
            let dir = pod.dir.join(&container.name);
            std::fs::create_dir_all(&dir).expect("the container's folder");
            let run_options = self.run_options(pod_spec, container, &pod.dir).await;
            let engine_name = format!("nw-{}-{}-{}", self.namespace, pod.name, container.name);
            self.containers.push(engine_name.clone());
            let mut args: Vec<String> = vec!["run".into(), "--detach".into()];
            args.extend(["--name".into(), engine_name.clone()]);
            args.extend(run_options.iter().cloned());
            args.extend(self.command_line(container, &dir));
            let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
            docker_ok(&arg_refs);
            started.push((engine_name, run_options));
        }
        started
    }

    /// Writes the pod's and the Job's end; returns the run of the main container.
    async fn end_pod(
        &self,
        jobs: &Api<Job>,
        job_name: &str,
        pod: &RunningPod,
        pod_spec: &PodSpec,
        runs: Vec<(ContainerRun, ContainerEnd)>,
    ) -> PodRun {
        self.write_ending(jobs, job_name, pod, pod_spec, &runs)
            .await;
        let main = runs
            .iter()
            .find(|(run, _)| run.name == SIDECAR)
            .or_else(|| {
                let first = pod_spec.containers.first().map(|c| c.name.as_str());
                runs.iter()
                    .find(|(run, _)| Some(run.name.as_str()) == first)
            })
            // An init container failed: the pod's end is its.
            .or(runs.last())
            .map(|(run, _)| run.clone())
            .expect("a container ran");
        PodRun {
            ending: main.ending,
            logs: main.logs,
            run_options: main.run_options,
            containers: runs.into_iter().map(|(run, _)| run).collect(),
        }
    }

    /// Creates the Job's pod, as the Job controller does, bound to a node, as the scheduler does.
    async fn create_pod(&self, job: &Job, spec: &PodSpec, started: jiff::Timestamp) -> String {
        let job_name = job.name_any();
        let template = &job.spec.as_ref().expect("a Job spec").template;
        let mut labels = template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        labels.insert("batch.kubernetes.io/job-name".into(), job_name.clone());
        labels.insert("job-name".into(), job_name.clone());
        let suffix = format!("{:05x}", started.subsec_nanosecond() as u32 & 0xfffff);
        let pod_name = format!("{job_name}-{suffix}");
        let mut spec = serde_json::to_value(spec).expect("a pod spec");
        spec["nodeName"] = json!("kubelet-harness");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": pod_name,
                "labels": labels,
                "ownerReferences": [{
                    "apiVersion": "batch/v1", "kind": "Job", "name": job_name,
                    "uid": job.uid().expect("a uid"), "controller": true, "blockOwnerDeletion": true,
                }],
            },
            "spec": spec,
        }))
        .expect("a pod");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("the pod is created");
        pod_name
    }

    async fn set_pod_running(
        &self,
        pod_name: &str,
        containers: &[Container],
        started: jiff::Timestamp,
    ) {
        let statuses: Vec<Value> = containers
            .iter()
            .map(|container| {
                json!({
                    "name": container.name, "image": container.image, "imageID": "",
                    "ready": true, "restartCount": 0, "started": true,
                    "state": {"running": {"startedAt": started.to_string()}},
                })
            })
            .collect();
        let status = json!({"status": {
            "phase": "Running",
            "startTime": started.to_string(),
            "hostIP": "127.0.0.1",
            "containerStatuses": statuses,
        }});
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        pods.patch_status(pod_name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("the pod's status is set");
    }

    /// The pod's terminated containers, then the Job's end, as the kubelet and Job controller
    /// write them.
    async fn write_ending(
        &self,
        jobs: &Api<Job>,
        job_name: &str,
        pod: &RunningPod,
        pod_spec: &PodSpec,
        runs: &[(ContainerRun, ContainerEnd)],
    ) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let deadline_exceeded = runs.iter().any(|(_, end)| end.deadline_exceeded);
        let failed = deadline_exceeded || runs.iter().any(|(_, end)| end.exit_code != 0);
        let is_init = |name: &str| {
            pod_spec
                .init_containers
                .iter()
                .flatten()
                .any(|c| c.name == name)
        };
        let (init, main): (Vec<_>, Vec<_>) = runs.iter().partition(|(run, _)| is_init(&run.name));
        let terminated = |(run, end): &&(ContainerRun, ContainerEnd)| {
            let image = pod_spec
                .init_containers
                .iter()
                .flatten()
                .chain(&pod_spec.containers)
                .find(|c| c.name == run.name)
                .and_then(|c| c.image.clone());
            let message = match &run.ending {
                Ending::Exited { message, .. } => message.clone(),
                Ending::DeadlineExceeded { .. } => String::new(),
            };
            json!({
                "name": run.name, "image": image, "imageID": "",
                "ready": false, "restartCount": 0, "started": false,
                "state": {"terminated": {
                    "exitCode": end.exit_code, "reason": end.reason(), "message": message,
                    "startedAt": end.started_at, "finishedAt": end.finished_at,
                }},
            })
        };
        let mut status = json!({"status": {
            "phase": if failed { "Failed" } else { "Succeeded" },
            "containerStatuses": main.iter().map(terminated).collect::<Vec<_>>(),
        }});
        if !init.is_empty() {
            status["status"]["initContainerStatuses"] =
                init.iter().map(terminated).collect::<Vec<_>>().into();
        }
        pods.patch_status(&pod.name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("the pod's status is set");
        let now = jiff::Timestamp::now().to_string();
        let job_status = if deadline_exceeded {
            // The Job controller deletes the active pod of a Job past its deadline.
            pods.delete(&pod.name, &DeleteParams::default())
                .await
                .expect("the pod is deleted");
            json!({"failed": 1, "active": 0, "conditions": [
                job_condition("FailureTarget", "DeadlineExceeded", "Job was active longer than specified deadline", &now),
                job_condition("Failed", "DeadlineExceeded", "Job was active longer than specified deadline", &now),
            ]})
        } else if failed {
            json!({"failed": 1, "active": 0, "conditions": [
                job_condition("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit", &now),
                job_condition("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit", &now),
            ]})
        } else {
            json!({"succeeded": 1, "active": 0, "completionTime": now, "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
                {"type": "Complete", "status": "True", "lastTransitionTime": now},
            ]})
        };
        set_job_status(jobs, job_name, job_status).await;
    }

    /// The `docker run` options of the pod: user, security, resources, environment, mounts.
    async fn run_options(
        &self,
        pod: &PodSpec,
        container: &Container,
        pod_dir: &Path,
    ) -> Vec<String> {
        let mut options = vec!["--network".to_owned(), "host".to_owned()];
        options.extend(security_options(pod, container, &image_user(container)));
        if let Some(memory) = container
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|limits| limits.get("memory"))
        {
            let bytes = quantity_bytes(&memory.0);
            // No swap: a pod over its limit is killed, not slowed down.
            options.extend([
                format!("--memory={bytes}"),
                format!("--memory-swap={bytes}"),
            ]);
        }
        if let Some(dir) = &container.working_dir {
            options.extend(["--workdir".into(), dir.clone()]);
        }
        let env_file = pod_dir.join(&container.name).join("env");
        let env = self.environment(container).await;
        let lines: String = env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        std::fs::write(&env_file, lines).expect("the env file");
        std::fs::set_permissions(&env_file, std::fs::Permissions::from_mode(0o600))
            .expect("the env file's mode");
        options.extend(["--env-file".into(), env_file.display().to_string()]);
        options.extend(self.mounts(pod, container, pod_dir).await);
        options
    }

    /// `--entrypoint`, the image and the arguments, with `$(VAR)` expanded as Kubernetes does.
    fn command_line(&self, container: &Container, container_dir: &Path) -> Vec<String> {
        let env = read_env_file(&container_dir.join("env"));
        let expand = |text: &String| expand_variables(text, &env);
        let mut line = Vec::new();
        let command: Vec<String> = container.command.iter().flatten().map(expand).collect();
        if let Some(entrypoint) = command.first() {
            line.extend(["--entrypoint".into(), entrypoint.clone()]);
        }
        line.push(container.image.clone().expect("an image"));
        line.extend(command.into_iter().skip(1));
        line.extend(container.args.iter().flatten().map(expand));
        line
    }

    /// The container's environment, Secrets resolved, in order.
    async fn environment(&self, container: &Container) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = Vec::new();
        for var in container.env.iter().flatten() {
            let value = match (&var.value, &var.value_from) {
                (Some(value), _) => expand_variables(value, &env),
                (None, Some(source)) => {
                    let key_ref = source.secret_key_ref.as_ref().unwrap_or_else(|| {
                        panic!("env {}: only secretKeyRef is emulated", var.name)
                    });
                    let data = self.secret_data(&key_ref.name).await;
                    let bytes = data.get(&key_ref.key).unwrap_or_else(|| {
                        panic!(
                            "CreateContainerConfigError: Secret {} has no key {}",
                            key_ref.name, key_ref.key
                        )
                    });
                    String::from_utf8(bytes.clone()).expect("a UTF-8 Secret value")
                }
                (None, None) => String::new(),
            };
            assert!(
                !value.contains('\n'),
                "env {}: a value with a newline",
                var.name
            );
            env.push((var.name.clone(), value));
        }
        env
    }

    async fn secret_data(&self, name: &str) -> BTreeMap<String, Vec<u8>> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let secret = secrets
            .get_opt(name)
            .await
            .expect("the Secret is read")
            .unwrap_or_else(|| panic!("CreateContainerConfigError: Secret {name} not found"));
        let mut data: BTreeMap<String, Vec<u8>> = secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        for (key, value) in secret.string_data.unwrap_or_default() {
            data.insert(key, value.into_bytes());
        }
        data
    }

    /// `--mount` options for every volume mount, the folders made, and the termination log.
    async fn mounts(&self, pod: &PodSpec, container: &Container, pod_dir: &Path) -> Vec<String> {
        let fs_group = pod.security_context.as_ref().and_then(|s| s.fs_group);
        let mut options = Vec::new();
        for mount in container.volume_mounts.iter().flatten() {
            let volume = pod
                .volumes
                .iter()
                .flatten()
                .find(|v| v.name == mount.name)
                .unwrap_or_else(|| panic!("the mount {} names no volume", mount.name));
            let (source, volume_read_only) = self.volume_source(volume, fs_group, pod_dir).await;
            let source = match &mount.sub_path {
                Some(sub_path) if !sub_path.is_empty() => source.join(sub_path),
                _ => source,
            };
            let read_only = volume_read_only || mount.read_only.unwrap_or(false);
            options.extend([
                "--mount".into(),
                bind_mount(&source, &mount.mount_path, read_only),
            ]);
        }
        let log = pod_dir.join(&container.name).join("termination-log");
        std::fs::write(&log, b"").expect("the termination log");
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666))
            .expect("the termination log's mode");
        let path = container
            .termination_message_path
            .clone()
            .unwrap_or_else(|| "/dev/termination-log".into());
        options.extend(["--mount".into(), bind_mount(&log, &path, false)]);
        options
    }

    /// The host folder of a volume, and whether it is read-only whatever the mount says.
    async fn volume_source(
        &self,
        volume: &Volume,
        fs_group: Option<i64>,
        pod_dir: &Path,
    ) -> (PathBuf, bool) {
        let folder = pod_dir.join("volumes").join(&volume.name);
        if let Some(secret) = &volume.secret {
            let name = secret.secret_name.clone().expect("a Secret name");
            let data = self.secret_data(&name).await;
            std::fs::create_dir_all(&folder).expect("the Secret's folder");
            let default_mode = secret.default_mode.unwrap_or(0o644) as u32;
            let items: Vec<(String, String, u32)> = match &secret.items {
                Some(items) => items
                    .iter()
                    .map(|i| {
                        (
                            i.key.clone(),
                            i.path.clone(),
                            i.mode.map_or(default_mode, |m| m as u32),
                        )
                    })
                    .collect(),
                None => data
                    .keys()
                    .map(|k| (k.clone(), k.clone(), default_mode))
                    .collect(),
            };
            for (key, path, mode) in items {
                let bytes = data.get(&key).unwrap_or_else(|| {
                    panic!("Secret {name} has no key {key}: the volume cannot mount")
                });
                let file = folder.join(&path);
                std::fs::create_dir_all(file.parent().expect("a parent")).expect("a folder");
                std::fs::write(&file, bytes).expect("a Secret file");
                std::os::unix::fs::chown(&file, Some(0), fs_group.map(|g| g as u32).or(Some(0)))
                    .expect("the Secret file's owner");
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode))
                    .expect("the Secret file's mode");
            }
            return (folder, true);
        }
        if volume.empty_dir.is_some() {
            std::fs::create_dir_all(&folder).expect("the emptyDir");
            std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o777))
                .expect("the emptyDir's mode");
            return (folder, false);
        }
        if let Some(claim) = &volume.persistent_volume_claim {
            let claims: Api<PersistentVolumeClaim> =
                Api::namespaced(self.client.clone(), &self.namespace);
            assert!(
                claims
                    .get_opt(&claim.claim_name)
                    .await
                    .expect("claims are read")
                    .is_some(),
                "the claim {} does not exist: the pod would stay Pending",
                claim.claim_name
            );
            let folder = self.claims.get(&claim.claim_name).unwrap_or_else(|| {
                panic!(
                    "the claim {} has no host folder (Kubelet::claim): the pod would stay Pending",
                    claim.claim_name
                )
            });
            return (folder.clone(), claim.read_only.unwrap_or(false));
        }
        panic!(
            "volume {}: only Secret, emptyDir and persistentVolumeClaim volumes are emulated",
            volume.name
        );
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        for container in &self.containers {
            let _ = docker(&["rm", "--force", container]);
        }
        let _ = std::fs::remove_dir_all(&self.work);
    }
}

/// `--user`, `--group-add`, `--read-only`, capabilities and the security options of the pod.
fn security_options(pod: &PodSpec, container: &Container, image_user: &str) -> Vec<String> {
    let default = PodSecurityContext::default();
    let pod_context = pod.security_context.as_ref().unwrap_or(&default);
    let context = container.security_context.clone().unwrap_or_default();
    let mut options = Vec::new();
    let user = context.run_as_user.or(pod_context.run_as_user);
    let group = context.run_as_group.or(pod_context.run_as_group);
    let uid: i64 = match user {
        Some(uid) => uid,
        None => image_user
            .split(':')
            .next()
            .and_then(|u| u.parse().ok())
            .unwrap_or(0),
    };
    if context.run_as_non_root.or(pod_context.run_as_non_root) == Some(true) {
        assert_ne!(
            uid, 0,
            "CreateContainerConfigError: runAsNonRoot, but the container would run as root"
        );
    }
    match (user, group) {
        (Some(uid), Some(gid)) => options.extend(["--user".into(), format!("{uid}:{gid}")]),
        (Some(uid), None) => options.extend(["--user".into(), uid.to_string()]),
        (None, Some(gid)) => options.extend(["--user".into(), format!("{uid}:{gid}")]),
        (None, None) => {}
    }
    let groups = pod_context
        .fs_group
        .into_iter()
        .chain(pod_context.supplemental_groups.iter().flatten().copied());
    for group in groups {
        options.extend(["--group-add".into(), group.to_string()]);
    }
    if context.read_only_root_filesystem == Some(true) {
        options.push("--read-only".into());
    }
    if context.privileged == Some(true) {
        options.push("--privileged".into());
    }
    if let Some(capabilities) = &context.capabilities {
        for cap in capabilities.drop.iter().flatten() {
            options.push(format!("--cap-drop={cap}"));
        }
        for cap in capabilities.add.iter().flatten() {
            options.push(format!("--cap-add={cap}"));
        }
    }
    if context.allow_privilege_escalation == Some(false) {
        options.extend(["--security-opt".into(), "no-new-privileges".into()]);
    }
    let seccomp = context
        .seccomp_profile
        .or_else(|| pod_context.seccomp_profile.clone())
        .map(|p| p.type_)
        .unwrap_or_else(|| "Unconfined".into());
    match seccomp.as_str() {
        "RuntimeDefault" => {}
        "Unconfined" => options.extend(["--security-opt".into(), "seccomp=unconfined".into()]),
        other => panic!("seccomp profile {other} is not emulated"),
    }
    options
}

/// The image's configured user, for `runAsNonRoot` without `runAsUser`.
fn image_user(container: &Container) -> String {
    let image = container.image.clone().expect("an image");
    docker_ok(&["image", "inspect", "--format", "{{.Config.User}}", &image])
}

fn bind_mount(source: &Path, target: &str, read_only: bool) -> String {
    let mut mount = format!("type=bind,source={},target={target}", source.display());
    if read_only {
        mount.push_str(",readonly");
    }
    mount
}

/// Bytes of a Kubernetes quantity (`64Mi`, `1G`, `500k`, `1048576`).
pub fn quantity_bytes(quantity: &str) -> u64 {
    let units: [(&str, u64); 10] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("m", 0),
        ("", 1),
    ];
    let (number, multiplier) = units
        .iter()
        .find_map(|(suffix, multiplier)| quantity.strip_suffix(suffix).map(|n| (n, *multiplier)))
        .expect("a quantity");
    assert!(
        multiplier != 0,
        "a memory quantity in millibytes: {quantity}"
    );
    number.parse::<u64>().expect("an integer quantity") * multiplier
}

/// Kubernetes' `$(VAR)` expansion: defined variables are replaced, `$$` is a literal `$`,
/// anything else stays as written.
pub fn expand_variables(text: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(index) = rest.find('$') {
        out.push_str(&rest[..index]);
        let after = &rest[index + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some((name, tail)) = after.strip_prefix('(').and_then(|a| a.split_once(')')) {
            match env.iter().rev().find(|(key, _)| key == name) {
                Some((_, value)) => out.push_str(value),
                None => out.push_str(&format!("$({name})")),
            }
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn read_env_file(path: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .expect("the env file")
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// What the engine says of an ended container.
#[derive(Clone)]
struct ContainerEnd {
    exit_code: i32,
    oom_killed: bool,
    deadline_exceeded: bool,
    started_at: String,
    finished_at: String,
}

impl ContainerEnd {
    fn reason(&self) -> &'static str {
        match (self.oom_killed, self.exit_code) {
            (true, _) => "OOMKilled",
            (false, 0) => "Completed",
            _ => "Error",
        }
    }
}

/// Waits until every container of `started` exits, or stops those left at `deadline` (SIGTERM,
/// SIGKILL after `grace`, all at once as the kubelet does); their ends in the same order.
async fn wait_for_exit(
    started: &[(String, Vec<String>)],
    deadline: Option<Instant>,
    grace: i64,
) -> Vec<ContainerEnd> {
    let mut deadline_exceeded = false;
    loop {
        let states: Vec<Value> = started
            .iter()
            .map(|(name, _)| {
                serde_json::from_str(&docker_ok(&[
                    "inspect",
                    "--format",
                    "{{json .State}}",
                    name,
                ]))
                .expect("the container's state")
            })
            .collect();
        let ended = |state: &Value| state["Status"] == "exited" || state["Status"] == "dead";
        if states.iter().all(ended) {
            return states
                .iter()
                .map(|state| ContainerEnd {
                    exit_code: state["ExitCode"].as_i64().unwrap_or(-1) as i32,
                    oom_killed: state["OOMKilled"] == true,
                    deadline_exceeded,
                    started_at: rfc3339(&state["StartedAt"]),
                    finished_at: rfc3339(&state["FinishedAt"]),
                })
                .collect();
        }
        if deadline.is_some_and(|d| Instant::now() >= d) && !deadline_exceeded {
            deadline_exceeded = true;
            let grace = grace.to_string();
            let mut args = vec!["stop", "--time", grace.as_str()];
            args.extend(started.iter().map(|(name, _)| name.as_str()));
            docker_ok(&args);
            continue;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The runs of `containers`, started as `started`, that ended as `ends`.
fn ended_runs<'a>(
    pod: &RunningPod,
    containers: impl IntoIterator<Item = &'a Container>,
    started: Vec<(String, Vec<String>)>,
    ends: &[ContainerEnd],
) -> Vec<(ContainerRun, ContainerEnd)> {
    containers
        .into_iter()
        .zip(started)
        .zip(ends)
        .map(|((container, (engine_name, run_options)), end)| {
            let logs = container_logs(&engine_name);
            let dir = pod.dir.join(&container.name);
            let message = termination_message(&dir, container, end.exit_code, &logs);
            let ending = if end.deadline_exceeded {
                Ending::DeadlineExceeded {
                    exit_code: end.exit_code,
                }
            } else {
                Ending::Exited {
                    exit_code: end.exit_code,
                    reason: end.reason().into(),
                    message,
                }
            };
            let run = ContainerRun {
                name: container.name.clone(),
                ending,
                logs,
                run_options,
            };
            (run, end.clone())
        })
        .collect()
}

/// The engine's nanosecond timestamps as the seconds Kubernetes stores.
fn rfc3339(value: &Value) -> String {
    let text = value.as_str().unwrap_or_default();
    text.parse::<jiff::Timestamp>()
        .map(|t| {
            jiff::Timestamp::from_second(t.as_second())
                .expect("a time")
                .to_string()
        })
        .unwrap_or_else(|_| jiff::Timestamp::now().to_string())
}

fn container_logs(container: &str) -> String {
    let output = docker(&["logs", container]);
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The file at `terminationMessagePath`, or the logs' tail under `FallbackToLogsOnError`.
fn termination_message(
    container_dir: &Path,
    container: &Container,
    exit_code: i32,
    logs: &str,
) -> String {
    let mut message = std::fs::read(container_dir.join("termination-log")).unwrap_or_default();
    let fallback = container.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
    if message.is_empty() && fallback && exit_code != 0 {
        let lines: Vec<&str> = logs.lines().rev().take(80).collect();
        message = lines
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
            .into_bytes();
    }
    message.truncate(TERMINATION_MESSAGE_LIMIT);
    String::from_utf8_lossy(&message).into_owned()
}

fn job_condition(type_: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": type_, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now})
}

async fn set_job_status(jobs: &Api<Job>, name: &str, status: Value) {
    jobs.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": status })),
    )
    .await
    .expect("the Job's status is set");
}

"""StreamingJob on its own: it installs charts/streaming-job (found from the repository, not the working
directory) as a helm.v4.Chart, and the objects the chart renders from the values Pulumi passes are the ones
the stack needs: a retained (and, in prod, protected) checkpoint claim, a SparkApplication waited for until
RUNNING whose volumes, credentials and ports never need spark-operator's webhook and whose arguments the
job itself accepts, and the driver's PodMonitor."""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pytest

from infra.components.streaming_job import StreamingJob, StreamingJobArgs
from infra.config import ConfigError, JobConfig, StackConfig
from infra.kafka_access import KafkaClient
from infra.network import Peers
from jobs.common.session import CHECKPOINT_FS_CONF, STATE_STORE_DRAIN_PLUGIN, session_conf
from streamstack.paths import REPO_ROOT
from tests.infra.conftest import Objects, Stack, build, load_config

BOOTSTRAP = "streamstack-kafka-bootstrap.kafka.svc:9092"
RUNNING = "jsonpath={.status.applicationState.state}=RUNNING"


def job_args(config: StackConfig, name: str, nodes: int | None = None) -> StreamingJobArgs:
    job = next(job for job in config.jobs if job.name == name)
    return StreamingJobArgs(
        job=job,
        spark=config.spark,
        kafka=KafkaClient(bootstrap_servers=BOOTSTRAP, user_secret=f"{name}-secret"),
        cluster_nodes=nodes or config.cluster.nodes,
        peers=Peers.of(config.kafka, config.monitoring.namespace),
    )


def build_job(
    mocked: Callable[[str], Stack], stack: str, name: str, jobs: list[dict[str, Any]] | None = None
) -> tuple[Stack, Objects, JobConfig]:
    """The job `name` of the stack (its `streamstack:jobs` entries replaced by `jobs` when given) built
    with Pulumi's mocks: the recorder, the chart's objects and the job's config."""
    recorder = mocked(stack)
    config = load_config(stack) if jobs is None else load_config(stack, jobs=jobs)
    args = job_args(config, name)
    names: list[str] = []

    def component() -> pulumi.Output[None]:
        return StreamingJob(name, args).claim_name.apply(names.append)

    build(component)
    assert names == [args.job.checkpoint_claim]
    return recorder, recorder.chart_objects(config.cluster.kubernetes_version), args.job


def conf(application: dict[str, Any]) -> dict[str, str]:
    value: dict[str, str] = application["spec"]["sparkConf"]
    return value


def parse_job_arguments(job: JobConfig, arguments: list[str]) -> Any:
    """The job's own command-line parser: an argument it does not know fails here, not in the cluster."""
    module = importlib.import_module(f"jobs.{job.module}.main")
    return module.parse_args(arguments)


def test_the_component_installs_our_chart_found_from_the_repository(
    mocked: Callable[[str], Stack], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a working directory without charts/ must not matter
    recorder, objects, job = build_job(mocked, "dev", "user-view")
    (chart,) = recorder.charts()
    assert chart.inputs["chart"] == str(REPO_ROOT / "charts" / "streaming-job")
    assert Path(chart.inputs["chart"]).is_absolute()
    assert (chart.inputs["name"], chart.inputs["namespace"]) == (job.name, "streaming")
    # Nothing of the job is built by the component itself any more: every object comes from the chart.
    assert [r for r in recorder.resources() if r.custom] == []
    assert sorted(item.manifest["kind"] for item in objects.objects) == [
        "NetworkPolicy",
        "NetworkPolicy",
        "PersistentVolumeClaim",
        "PodMonitor",
        "SparkApplication",
    ]


def test_checkpoint_claim_outlives_the_job_and_protection_follows_config(
    mocked: Callable[[str], Stack],
) -> None:
    for stack, protected in (("dev", False), ("prod", True)):
        _, objects, job = build_job(mocked, stack, "sessionization")
        claim = objects.named("PersistentVolumeClaim", job.checkpoint_claim)
        assert claim.manifest["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert claim.retain_on_delete is True
        assert claim.protect is protected
        spec = claim.manifest["spec"]
        assert spec["accessModes"] == [job.checkpoint.access_mode]
        assert spec["storageClassName"] == job.checkpoint.storage_class
        assert spec["resources"]["requests"]["storage"] == job.checkpoint.size
        # Only the claim is kept: the application and its monitor go with the job.
        others = [item for item in objects.objects if item is not claim]
        assert not any(item.retain_on_delete or item.protect for item in others)


def test_spark_application_is_a_python_streaming_app_waited_for_until_running(
    mocked: Callable[[str], Stack],
) -> None:
    _, objects, job = build_job(mocked, "dev", "clickstream-windows")
    application = objects.manifest("SparkApplication", job.name)
    assert application["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    annotations = application["metadata"]["annotations"]
    assert annotations["pulumi.com/waitFor"] == RUNNING
    # Created after its claim when Pulumi applies the chart's objects.
    assert annotations["config.kubernetes.io/depends-on"] == (
        f"/namespaces/streaming/PersistentVolumeClaim/{job.checkpoint_claim}"
    )
    spec = application["spec"]
    assert (spec["type"], spec["mode"], spec["sparkVersion"]) == ("Python", "cluster", "4.3.0")
    assert spec["image"] == "streamstack/jobs:0.1.0-spark4.3.0"
    assert spec["mainApplicationFile"] == "local:///opt/streamstack/app/jobs/clickstream_windows/__main__.py"
    # Always, not OnFailure: OnFailure can leave a crashed streaming app COMPLETED (spark-operator#1402).
    assert spec["restartPolicy"]["type"] == "Always"
    assert spec["restartPolicy"]["onFailureRetryInterval"] > 0
    assert spec["restartPolicy"]["onSubmissionFailureRetryInterval"] > 0
    assert spec["driver"]["serviceAccount"] == "spark"
    assert (spec["driver"]["cores"], spec["driver"]["coreRequest"], spec["driver"]["memory"]) == (
        1,
        "100m",
        "480m",
    )
    # No configured limit: the pod may use the cores Spark plans with.
    assert spec["driver"]["coreLimit"] == "1"
    assert (spec["executor"]["instances"], spec["executor"]["memory"]) == (1, "480m")
    assert "volumes" not in spec and "volumeMounts" not in spec["driver"]


def test_spark_application_carries_the_configured_memory_overhead(mocked: Callable[[str], Stack]) -> None:
    """spark-operator passes driver/executor memoryOverhead on as spark.{driver,executor}.memoryOverhead,
    which replaces Spark's max(0.4 x heap, 384 MiB); unset, the field is left out and Spark's rule holds."""
    _, objects, job = build_job(mocked, "dev", "order-state")
    spec = objects.manifest("SparkApplication", job.name)["spec"]
    assert (spec["driver"]["memoryOverhead"], spec["executor"]["memoryOverhead"]) == ("224m", "224m")
    assert (job.driver.memory_overhead, job.executor.memory_overhead) == ("224m", "224m")
    _, objects, job = build_job(mocked, "prod", "order-state")
    spec = objects.manifest("SparkApplication", job.name)["spec"]
    assert job.driver.memory_overhead is None and job.executor.memory_overhead is None
    assert "memoryOverhead" not in spec["driver"] and "memoryOverhead" not in spec["executor"]


def test_claim_reaches_the_driver_and_a_stateful_jobs_executors_through_spark_conf(
    mocked: Callable[[str], Stack],
) -> None:
    # Every job of the catalogue keeps state: an entry declares one stateless for the other case.
    for name, stateful in (("ad-attribution", True), ("user-view", False)):
        _, objects, job = build_job(mocked, "prod", name, [{"name": name, "stateful": stateful}])
        claim = objects.manifest("PersistentVolumeClaim", job.checkpoint_claim)["metadata"]["name"]
        settings = conf(objects.manifest("SparkApplication", job.name))
        driver = "spark.kubernetes.driver.volumes.persistentVolumeClaim.checkpoints"
        executor = "spark.kubernetes.executor.volumes.persistentVolumeClaim.checkpoints"
        assert settings[f"{driver}.options.claimName"] == claim
        assert settings[f"{driver}.mount.path"] == "/checkpoints"
        if stateful:
            assert settings[f"{executor}.options.claimName"] == claim
            assert settings[f"{executor}.mount.path"] == "/checkpoints"
        else:
            assert not [key for key in settings if key.startswith(executor)]


def test_arguments_are_flags_the_job_itself_accepts(mocked: Callable[[str], Stack]) -> None:
    config = load_config("prod")
    for job in config.jobs:
        _, objects, _ = build_job(mocked, "prod", job.name)
        application = objects.manifest("SparkApplication", job.name)
        parsed = parse_job_arguments(job, application["spec"]["arguments"])
        streaming = parsed.streaming
        mount = conf(application)[
            "spark.kubernetes.driver.volumes.persistentVolumeClaim.checkpoints.mount.path"
        ]
        assert streaming.checkpoint_dir == mount
        assert streaming.bootstrap_servers == BOOTSTRAP
        assert streaming.metrics_host == "0.0.0.0"
        assert streaming.metrics_port == job.metrics_port
        assert streaming.shadow_group_prefix == config.spark.shadow_group_prefix
        assert streaming.trigger_interval == job.trigger_interval
        assert streaming.shuffle_partitions == job.shuffle_partitions
        assert streaming.max_offsets_per_trigger == job.max_offsets_per_trigger
        assert parsed.topics_by_flag() == dict(job.topics)
        assert streaming.dead_letter_topic == job.dead_letter_topic


def test_pod_monitor_selects_the_driver_on_the_metrics_port(mocked: Callable[[str], Stack]) -> None:
    _, objects, job = build_job(mocked, "dev", "user-enrichment")
    application = objects.manifest("SparkApplication", job.name)
    (monitor,) = [item.manifest for item in objects.of_kind("PodMonitor")]
    selector = monitor["spec"]["selector"]["matchLabels"]
    # Spark labels its pods spark-role driver/executor on top of the pod templates' labels.
    driver = application["spec"]["driver"]["template"]
    executor = application["spec"]["executor"]["template"]
    assert selector.items() <= {**driver["metadata"]["labels"], "spark-role": "driver"}.items()
    assert not selector.items() <= {**executor["metadata"]["labels"], "spark-role": "executor"}.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    (container,) = driver["spec"]["containers"]
    assert container["name"] == "spark-kubernetes-driver"
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    metrics_port = parse_job_arguments(job, application["spec"]["arguments"]).streaming.metrics_port
    assert ports[endpoint["port"]] == metrics_port == job.metrics_port
    assert monitor["metadata"]["namespace"] == application["metadata"]["namespace"]
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [application["metadata"]["namespace"]]


def test_kafka_credentials_come_from_the_kafka_user_secret_as_environment(
    mocked: Callable[[str], Stack],
) -> None:
    _, objects, job = build_job(mocked, "dev", "sessionization")
    application = objects.manifest("SparkApplication", job.name)
    settings = conf(application)
    for role in ("driver", "executor"):
        reference = settings[f"spark.kubernetes.{role}.secretKeyRef.STREAMSTACK_KAFKA_SASL_JAAS_CONFIG"]
        assert reference == "sessionization-secret:sasl.jaas.config"
    assert settings["spark.kubernetes.driverEnv.STREAMSTACK_KAFKA_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT"
    assert settings["spark.executorEnv.STREAMSTACK_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert objects.of_kind("Secret") == []
    flattened = repr(application).lower()
    assert "password" not in flattened and "jaas_config=" not in flattened


def test_pods_run_restricted_from_templates_and_only_the_driver_gets_a_token(
    mocked: Callable[[str], Stack],
) -> None:
    _, objects, job = build_job(mocked, "dev", "clickstream-windows")
    spec = objects.manifest("SparkApplication", job.name)["spec"]
    for role, token in (("driver", True), ("executor", False)):
        template = spec[role]["template"]["spec"]
        assert template["automountServiceAccountToken"] is token
        assert template["securityContext"]["runAsNonRoot"] is True
        assert template["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        (container,) = template["containers"]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        # A read-only root needs writable scratch space, given through Spark conf as well.
        assert spec["sparkConf"][f"spark.kubernetes.{role}.volumes.emptyDir.tmp.mount.path"] == "/tmp"


def test_the_jobs_network_policies_reach_the_configured_kafka_and_prometheus(
    mocked: Callable[[str], Stack],
) -> None:
    _, objects, job = build_job(mocked, "dev", "ad-attribution")
    every_pod = objects.manifest("NetworkPolicy", job.name)["spec"]
    kafka_rule = every_pod["egress"][1]
    (kafka_peer,) = kafka_rule["to"]
    assert kafka_peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "kafka"}
    assert kafka_peer["podSelector"]["matchLabels"]["strimzi.io/cluster"] == "streamstack"
    assert sorted(port["port"] for port in kafka_rule["ports"]) == [9092, 9093]
    driver = objects.manifest("NetworkPolicy", f"{job.name}-driver")["spec"]
    (scrape,) = driver["ingress"]
    assert scrape["ports"] == [{"port": job.metrics_port, "protocol": "TCP"}]
    assert scrape["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }


def test_args_refuse_a_stateful_job_on_a_driver_only_volume() -> None:
    config = load_config("dev")
    with pytest.raises(ConfigError, match=re.escape("streamstack:jobDefaults.checkpoint.accessMode")):
        job_args(config, "sessionization", nodes=3)
    # Every job of the catalogue keeps state: an entry declares one stateless.
    stateless = job_args(
        load_config("dev", jobs=[{"name": "user-view", "stateful": False}]), "user-view", nodes=3
    )
    assert stateless.job.checkpoint.access_mode == "ReadWriteOnce"
    pod_only = dataclasses.replace(
        stateless.job,
        stateful=True,
        checkpoint=dataclasses.replace(stateless.job.checkpoint, access_mode="ReadWriteOncePod"),
    )
    with pytest.raises(ConfigError, match="ReadWriteOncePod"):
        StreamingJobArgs(
            job=pod_only,
            spark=config.spark,
            kafka=KafkaClient(bootstrap_servers=BOOTSTRAP, user_secret="user-view"),
            cluster_nodes=1,
            peers=stateless.peers,
        )


def test_the_cluster_driver_writes_its_checkpoint_without_checksum_files(
    mocked: Callable[[str], Stack],
) -> None:
    """The session the job builds in the cluster from the rendered arguments gets the jobs' checkpoint
    filesystem settings (jobs.common.session: the same code builds the local session), its checkpoint is a
    plain path on the claim (the file scheme, which those settings cover), and the SparkApplication's own
    Spark settings do not override them."""
    for name in ("clickstream-windows", "user-view"):
        _, objects, job = build_job(mocked, "prod", name)
        application = objects.manifest("SparkApplication", job.name)
        streaming = parse_job_arguments(job, application["spec"]["arguments"]).streaming

        assert CHECKPOINT_FS_CONF.items() <= session_conf(streaming).items()
        filesystem = session_conf(streaming)["spark.hadoop.fs.file.impl"]
        assert filesystem == "streamstack.jvm.LocalCheckpointFileSystem"
        assert streaming.checkpoint_dir.startswith("/checkpoints")
        assert not CHECKPOINT_FS_CONF.keys() & conf(application).keys()
        # The plugin that drains the state stores at a stop, which the SparkApplication does not replace.
        assert session_conf(streaming)["spark.plugins"] == STATE_STORE_DRAIN_PLUGIN
        assert "spark.plugins" not in conf(application)

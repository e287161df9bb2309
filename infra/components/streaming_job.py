"""StreamingJob: one PySpark Structured Streaming job, installed from our chart `charts/streaming-job` (the
SparkApplication, its checkpoint PersistentVolumeClaim, the driver's PodMonitor and the job's
NetworkPolicies: one source of truth for those objects, shared with plain `helm install`).

The chart goes in as a `helm.v4.Chart`, not a `helm.v3.Release`: Pulumi then manages each rendered object
itself, so
- `pulumi up` waits until the application is RUNNING: the chart renders the SparkApplication with the
  `pulumi.com/waitFor: jsonpath={.status.applicationState.state}=RUNNING` annotation passed in `annotations`,
  which Pulumi honours only on objects it manages (a Release's objects are Helm's, and Helm's own wait
  treats a custom resource as ready at once: helm/helm#12136);
- the checkpoint claim outlives the job: the chart annotates it `helm.sh/resource-policy: keep`, which the
  Chart resource turns into `retainOnDelete` (pulumi-kubernetes provider/pkg/provider/helm/v4/chart.go),
  and this component's transform sets `retain_on_delete` and, with `checkpoint.protect`, `protect` on it,
  so a redeploy or `pulumi destroy` never deletes it and the job resumes from the same offsets and state;
- the chart renders `config.kubernetes.io/depends-on` on the SparkApplication, so the claim exists first.

What the values say (chart_values below): the job's flags (topics, dead letters, settings) as extraArguments;
volumes, environment, ports and security contexts reach the pods through Spark conf and pod templates,
never spark-operator's webhook; the Kafka credentials come from the job's KafkaUser Secret by reference
(`sasl.jaas.config`, an environment variable, never an argument or conf value); with `kafka.clientTls` the
job uses SASL_SSL on the TLS listener and the cluster CA's Secret (KafkaClusterCa's copy) is mounted on the
driver and every executor, since both run Kafka clients; restart policy Always
(OnFailure can end a crashed streaming app COMPLETED, spark-operator#1402). The chart validates the values
(values.schema.json and its own combination checks) when Pulumi renders it, so a bad value fails preview.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from infra.components.common import TIMEOUT_SECONDS, WAIT_FOR, KafkaClientArgs, child
from infra.config import (
    STREAMING_JOB_CHART,
    JobConfig,
    SparkConfig,
    image_reference,
    require_checkpoint_reach,
    setting,
)

CHECKPOINT_MOUNT = "/checkpoints"
RUNNING = "jsonpath={.status.applicationState.state}=RUNNING"
# Until RUNNING on a cold node: spark-operator runs spark-submit (a JVM) for each job, then its driver starts.
RUNNING_TIMEOUT_S = 600
CLAIM_TYPE = "kubernetes:core/v1:PersistentVolumeClaim"


@dataclass(frozen=True, kw_only=True)
class StreamingJobArgs(KafkaClientArgs):
    """`kafka`'s CA Secret, if any, is mounted on the driver and every executor (both run Kafka clients)."""

    job: JobConfig
    spark: SparkConfig

    def __post_init__(self) -> None:
        require_checkpoint_reach(self.job, self.cluster_nodes)


def job_arguments(job: JobConfig) -> list[str]:
    """The job's own flags beyond the ones the chart sets from its values: dead letters, topics, settings."""
    arguments = ["--dead-letter-topic", job.dead_letter_topic]
    for flag, topic in job.topics:
        arguments += [flag, topic]
    return arguments + list(job.settings)


def chart_values(args: StreamingJobArgs) -> dict[str, Any]:
    """The streaming-job chart's values for this job; the chart's defaults fill in the rest."""
    job, spark = args.job, args.spark
    checkpoint = job.checkpoint
    return {
        # Objects named after the job: SparkApplication <job>, claim <job>-checkpoints (job.checkpoint_claim).
        "fullnameOverride": job.name,
        "image": image_reference(setting("spark.image"), spark.image).chart_values(spark.image_pull_policy),
        "sparkVersion": spark.version,
        "serviceAccountName": spark.service_account,
        "job": {
            "module": job.module,
            "stateful": job.stateful,
            "triggerInterval": job.trigger_interval,
            "maxOffsetsPerTrigger": job.max_offsets_per_trigger or 0,
            "shufflePartitions": job.shuffle_partitions,
            "shadowGroupPrefix": spark.shadow_group_prefix,
            "extraArguments": job_arguments(job),
        },
        # The CA's file (STREAMSTACK_KAFKA_SSL_CA_FILE) is what the job hands to Spark's Kafka source and sink
        # as a PEM truststore.
        "kafka": args.kafka.chart_values(),
        "checkpoint": {
            "mountPath": CHECKPOINT_MOUNT,
            "size": checkpoint.size,
            "storageClassName": checkpoint.storage_class or "",
            "accessMode": checkpoint.access_mode,
            # The config's guard rail (require_checkpoint_reach) has already allowed a stateful job on a
            # ReadWriteOnce volume only on one node; the chart checks the same with this flag.
            "singleNode": args.cluster_nodes == 1,
        },
        "metrics": {"port": job.metrics_port},
        "driver": {
            "cores": job.driver.cores,
            "coreRequest": job.driver.core_request,
            # Without a configured limit the pod may use the cores Spark plans with.
            "coreLimit": job.driver.core_limit or str(job.driver.cores),
            "memory": job.driver.memory,
            **({"memoryOverhead": job.driver.memory_overhead} if job.driver.memory_overhead else {}),
        },
        "executor": {
            "instances": job.executor.instances,
            "cores": job.executor.cores,
            "coreRequest": job.executor.core_request,
            "coreLimit": job.executor.core_limit or str(job.executor.cores),
            "memory": job.executor.memory,
            **({"memoryOverhead": job.executor.memory_overhead} if job.executor.memory_overhead else {}),
        },
        # With Always the operator resubmits after every stop, waiting interval x attempts (linear backoff).
        "restartPolicy": {
            "type": "Always",
            "onFailureRetryInterval": 10,
            "onSubmissionFailureRetryInterval": 20,
        },
        "annotations": {WAIT_FOR: RUNNING, TIMEOUT_SECONDS: str(RUNNING_TIMEOUT_S)},
        "networkPolicy": args.peers.chart_values(api_server=True),
    }


def keep_checkpoint_claim(protect: bool) -> pulumi.ResourceTransform:
    """A transform for the chart's objects: the checkpoint claim is retained on delete and, with
    `checkpoint.protect`, protected, whatever the chart's annotations say."""

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        if args.type_ != CLAIM_TYPE:
            return None
        keep = pulumi.ResourceOptions(retain_on_delete=True, protect=protect)
        return pulumi.ResourceTransformResult(args.props, pulumi.ResourceOptions.merge(args.opts, keep))

    return transform


class StreamingJob(pulumi.ComponentResource):
    """The streaming-job chart for one job: SparkApplication, retained checkpoint claim, PodMonitor."""

    chart: kubernetes.helm.v4.Chart
    application_name: pulumi.Output[str]
    claim_name: pulumi.Output[str]

    def __init__(self, name: str, args: StreamingJobArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("streamstack:jobs:StreamingJob", name, None, opts)
        job = args.job
        self.chart = kubernetes.helm.v4.Chart(
            name,
            kubernetes.helm.v4.ChartArgs(
                chart=str(STREAMING_JOB_CHART),
                name=job.name,
                namespace=args.spark.jobs_namespace,
                values=chart_values(args),
            ),
            opts=child(self, transforms=[keep_checkpoint_claim(job.checkpoint.protect)]),
        )
        self.application_name = pulumi.Output.from_input(job.name)
        self.claim_name = pulumi.Output.from_input(job.checkpoint_claim)
        self.register_outputs({"application_name": self.application_name, "claim_name": self.claim_name})

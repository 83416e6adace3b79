"""Worker Versioning: which build of the workflow code a worker runs (docs/upgrading.md).

A worker started with a deployment name and a build id (`otherone worker --deployment-name
otherone --build-id 0.1.0`) polls as that version of a Temporal Worker Deployment. Every run it
starts is **pinned** to the build it started on: Temporal sends its workflow tasks to that
build's workers only, for as long as it waits (an approval for weeks, a question), so a deploy
never replays a waiting run on code it was not started on. New runs start on the deployment's
*current* version (`temporal worker deployment set-current-version`); the previous build keeps
its runs until they end (its version shows ``draining``, then ``drained``: stop its workers
then). A run that continues as new after its build stopped being current starts the new run on
the current build (`ContinueAsNewVersioningBehavior.AUTO_UPGRADE`): its carried state is data,
read by the new code, not history replayed by it.

Why pinned for every run, not auto-upgrade: an agent run's history is its loop (model calls,
tool calls, children, waits); a change of that loop between builds would make an auto-upgraded
run fail on replay, and agent runs are mostly short or waiting — the cases pinning handles
without any patch. Children are pinned to their parent's build (Temporal starts a pinned
parent's children on its version), so a run tree never spans two builds.

The workflow class declares no behaviour itself: a class with one could not run on an
unversioned worker (the server rejects every workflow task: the tests and `otherone dev` run
unversioned). The behaviour is the versioned worker's default instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from temporalio.client import Client
    from temporalio.worker import WorkerDeploymentConfig


@dataclass(frozen=True)
class WorkerDeployment:
    """A Worker Deployment version: the deployment (no ``.``) and this code's build id."""

    name: str
    build_id: str

    def __post_init__(self) -> None:
        # Temporal reserves '.' as the separator of name and build: a name with one is refused
        # by the server while the worker starts without an error and never registers.
        if not self.name or "." in self.name:
            raise ValueError("a deployment name must be non-empty and hold no '.'")
        if not self.build_id:
            raise ValueError("a build id must be non-empty")

    def config(self) -> WorkerDeploymentConfig:
        """The SDK's options for a worker of this version: versioned, runs pinned."""
        from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
        from temporalio.worker import WorkerDeploymentConfig

        return WorkerDeploymentConfig(
            version=WorkerDeploymentVersion(deployment_name=self.name, build_id=self.build_id),
            use_worker_versioning=True,
            default_versioning_behavior=VersioningBehavior.PINNED,
        )

    def __str__(self) -> str:
        return f"{self.name}:{self.build_id}"


@dataclass(frozen=True)
class VersionState:
    """What Temporal says of a deployment version: ``current``, ``ramping``, ``draining``
    (runs are still pinned to it), ``drained`` (none is: its workers may stop) or
    ``inactive`` (never current)."""

    status: str
    drainage: str | None


async def set_current_version(client: Client, deployment: WorkerDeployment) -> None:
    """Make ``deployment`` its deployment's current version: new runs start on it (as
    ``temporal worker deployment set-current-version`` does). The version must have polled."""
    from temporalio.api.workflowservice.v1 import SetWorkerDeploymentCurrentVersionRequest

    await client.workflow_service.set_worker_deployment_current_version(
        SetWorkerDeploymentCurrentVersionRequest(
            namespace=client.namespace,
            deployment_name=deployment.name,
            build_id=deployment.build_id,
            identity=client.identity,
        )
    )


async def version_state(client: Client, deployment: WorkerDeployment) -> VersionState:
    """The version's status and drainage (``temporal worker deployment describe-version``)."""
    from temporalio.api.deployment.v1 import WorkerDeploymentVersion as VersionMessage
    from temporalio.api.enums.v1 import VersionDrainageStatus, WorkerDeploymentVersionStatus
    from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentVersionRequest

    described = await client.workflow_service.describe_worker_deployment_version(
        DescribeWorkerDeploymentVersionRequest(
            namespace=client.namespace,
            deployment_version=VersionMessage(
                deployment_name=deployment.name, build_id=deployment.build_id
            ),
        )
    )
    info = described.worker_deployment_version_info
    status = WorkerDeploymentVersionStatus.Name(info.status)
    drainage = VersionDrainageStatus.Name(info.drainage_info.status)
    return VersionState(
        status=status.removeprefix("WORKER_DEPLOYMENT_VERSION_STATUS_").lower(),
        drainage=None
        if drainage.endswith("UNSPECIFIED")
        else drainage.removeprefix("VERSION_DRAINAGE_STATUS_").lower(),
    )

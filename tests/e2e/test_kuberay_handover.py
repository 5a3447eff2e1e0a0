"""End to end: a RayService KubeRay made keeps serving when our operator takes it over,
and when KubeRay takes it back.

KubeRay here is the peer this repository builds from its Go module
(``hack/peers/kuberay.sh``: v1.5.0, the newest release the module proxy serves);
``$KUBERAY_BIN`` runs another build instead (the v1.7.0 hand-over is run that way by
hand: build ``ray-operator`` from its source). It runs as the benchmarks run it: admin
kubeconfig, ``--use-kubernetes-proxy``, no leader election, its RayJob CRD installed
next to ours (its informers need it). Our manager runs in ``kubernetes-proxy`` mode.

The scenario, one RayService (``config/samples``) with requests flowing through its
serve Service's endpoints all along:

1. KubeRay brings it to Ready; it is stopped, ours started: no request fails, and ours
   makes no new cluster (it recognises KubeRay's by its spec, whatever hash annotation
   it carries).
2. The head pod is deleted: ours recreates it, and the head Services **KubeRay made**
   (``<cluster>-head-svc`` and ``<svc>-head-svc``) select it again: their endpoints
   come back (our pods carry KubeRay's ``app.kubernetes.io/created-by``).
3. A ``rayVersion`` upgrade by ours completes with no failed request.
4. Ours is stopped, KubeRay started again: it serves on without a failed request.
   v1.5.0 and v1.7.0 both keep the cluster: they update a cluster whose
   ``ray.io/kuberay-version`` is not their own in place, and ours writes
   ``rayservice-operator`` there. (With its own version there, KubeRay would compare its
   hash annotation, computed from Go's JSON of the spec, with ours, and rebuild the
   cluster as a zero-downtime upgrade: measured with v1.7.0.)
5. The RayService carries ``ray.io/rayservice-finalizer`` (ours; KubeRay >= v1.6.2 uses
   the same one and removes it when it deletes the RayService). KubeRay v1.5.0 does not
   know it: the deleted RayService waits until the finalizer is removed by hand, as
   docs/operator/kuberay.md says - done here - and then it and its clusters
   go.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from runtime.client import client as client_
from runtime.client import errors
from runtime.testing import controlplane, process
from tests.e2e import harness, rayservices
from tests.e2e import test_rayservice as sample_
from tests.support import tools

# Every scenario here starts what only the suite's own cluster has (see own_cluster).
pytestmark = pytest.mark.own_cluster

ROOT = pathlib.Path(__file__).resolve().parents[2]
KUBERAY_SH = ROOT / "hack" / "peers" / "kuberay.sh"
NAME = sample_.NAME


@pytest.fixture(scope="module")
def kuberay_binary(world: harness.World, tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    if world.cp is None:
        pytest.fail(
            "not marked own_cluster, but it runs KubeRay next to the control plane it starts"
        )
    override = os.environ.get("KUBERAY_BIN")
    binary = pathlib.Path(override) if override else tools.built("hack/peers/kuberay.sh")
    crds = subprocess.run([str(KUBERAY_SH), "--crds"], capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]  # fmt: skip
    only_rayjobs = tmp_path_factory.mktemp("kuberay-crds")  # ours stay for the other kinds
    shutil.copy(pathlib.Path(crds) / "ray.io_rayjobs.yaml", only_rayjobs)
    world.cp.install_crds(only_rayjobs)
    return binary


class KubeRay:
    """KubeRay's operator as a child process (see the module docstring)."""

    def __init__(self, binary: pathlib.Path, world: harness.World, name: str) -> None:
        metrics, probes = controlplane.free_ports(2)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ["HOME"],
               "CLUSTER_DOMAIN": "cluster.local"}  # fmt: skip
        self.child = process.ChildProcess(
            [str(binary), "--kubeconfig", str(world.admin_kubeconfig),
             "--enable-leader-election=false", "--use-kubernetes-proxy",
             "--metrics-addr", f"127.0.0.1:{metrics}",
             "--health-probe-bind-address", f"127.0.0.1:{probes}"],
            log_path=world.log_dir / f"kuberay-{name}.log", name="KubeRay", env=env,
        )  # fmt: skip

    def stop(self) -> None:
        self.child.stop()


class KubeRays:
    """The KubeRay processes of one test (stopped afterwards)."""

    def __init__(self, binary: pathlib.Path, world: harness.World, test: str) -> None:
        self.binary, self.world, self.test = binary, world, test
        self.started: list[KubeRay] = []

    def start(self) -> KubeRay:
        one = KubeRay(self.binary, self.world, f"{self.test}-{len(self.started)}")
        self.started.append(one)
        return one


@pytest.fixture
def kuberays(
    kuberay_binary: pathlib.Path, world: harness.World, request: pytest.FixtureRequest
) -> Iterator[KubeRays]:
    started = KubeRays(kuberay_binary, world, request.node.name)
    yield started
    for one in started.started:
        one.stop()


async def head_endpoint_pods(api: client_.Client, namespace: str, service: str) -> set[str]:
    """The pods a Service's EndpointSlices list as ready."""
    slices = await api.list(
        harness.SLICES, namespace, label_selector=f"kubernetes.io/service-name={service}"
    )
    return {
        (e.get("targetRef") or {}).get("name", "")
        for s in slices.items
        for e in s.get("endpoints") or []
        if (e.get("conditions") or {}).get("ready") is True
    }


async def head_pod(api: client_.Client, namespace: str, cluster: str) -> str | None:
    pods = await api.list(
        harness.PODS, namespace, label_selector=f"ray.io/cluster={cluster},ray.io/node-type=head"
    )
    live = [p for p in pods.items if not p["metadata"].get("deletionTimestamp")]
    return live[0]["metadata"]["name"] if len(live) == 1 else None


async def test_kuberay_hands_a_rayservice_over_and_takes_it_back(
    world: harness.World, api: client_.Client, namespace: str,
    managers: harness.Managers, kuberays: KubeRays,
) -> None:  # fmt: skip
    kuberay = kuberays.start()
    await sample_.create_sample(api, namespace)
    first = rayservices.active_cluster(await sample_.wait_ready(api, namespace, within=180))
    assert first is not None
    made_by_kuberay = (await api.get(harness.SERVICES, namespace, f"{first}-head-svc"))["spec"]
    assert made_by_kuberay["selector"]["app.kubernetes.io/created-by"] == "kuberay-operator"

    # 1. The take-over: KubeRay stops, ours starts; requests keep being answered.
    async with (
        rayservices.ClusterCount(api, namespace) as count,
        sample_.traffic(api, world, namespace) as t,
    ):
        # KubeRay reports Ready while its workers' proxies may still answer 404 for a
        # moment (they join the serve Service first): the hand-over starts once every
        # endpoint answers.
        await t.wait_streak(60, within=60)
        before = len(t.failures)
        kuberay.stop()
        await managers.lead("kubernetes-proxy")
        await t.wait_requests(100)
        await sample_.wait_ready(api, namespace)
    assert t.failures[before:] == [], t.failures[before:][:5]
    assert count.seen == {first}, "no new cluster for one KubeRay made"
    print(f"take-over: {t.ok} answered, {len(t.failures) - before} failed after KubeRay stopped")

    # 2. A lost head pod: ours recreates it, and KubeRay's head Services select it.
    old_head = await head_pod(api, namespace, first)
    assert old_head is not None
    await api.delete(harness.PODS, namespace, old_head)

    async def selected_again() -> bool:
        new_head = await head_pod(api, namespace, first)
        if new_head in (None, old_head):
            return False
        for service in (f"{first}-head-svc", f"{NAME}-head-svc"):
            if new_head not in await head_endpoint_pods(api, namespace, service):
                return False
        return True

    await harness.until(selected_again, 90, "KubeRay's head Services select the new head")
    await sample_.wait_ready(api, namespace)

    # 3. An upgrade by ours, no request lost (from the moment every endpoint answers: a
    # head restarted without GCS fault tolerance loses Serve until its config is resent).
    async with sample_.traffic(api, world, namespace) as t:
        await t.wait_streak(60, within=60)
        before = len(t.failures)
        await sample_.update_spec(api, namespace, rayservices.bump_ray_version)
        second = rayservices.active_cluster(
            await sample_.wait_ready(api, namespace, cluster_not=first, within=150)
        )

        async def old_gone() -> bool:
            return await rayservices.cluster_names(api, namespace) == {second}

        await harness.until(old_gone, sample_.DELETION_DELAY + 60, "the old cluster deleted")
        await t.wait_requests(20)
    assert t.failures[before:] == [], t.failures[before:][:5]
    print(f"upgrade by ours: {t.ok} answered, {len(t.failures) - before} failed")

    # 4. The hand-back: ours stops, KubeRay starts; requests keep being answered.
    async with sample_.traffic(api, world, namespace) as t:
        await t.wait_requests(20)
        assert managers.stop_all() == []
        kuberays.start()
        await t.wait_requests(100)

        async def settled() -> bool:
            obj = await sample_.get(api, namespace)
            return (
                rayservices.condition(obj, "Ready").get("status") == "True"
                and not ((obj.get("status") or {}).get("pendingServiceStatus") or {}).get(
                    "rayClusterName"
                )
                and len(await rayservices.cluster_names(api, namespace)) == 1
            )

        await harness.until(settled, 180, "KubeRay settled: Ready, one cluster")
        await t.wait_requests(20)
    sample_.no_failures(t)
    after = rayservices.active_cluster(await sample_.get(api, namespace))
    kept = f"kept {second}" if after == second else f"replaced {second} with {after}"
    print(f"hand-back: {t.ok} answered, {len(t.failures)} failed; KubeRay {kept}")

    # 5. Deleting under KubeRay v1.5.0: our finalizer is removed by hand, as documented.
    obj = await sample_.get(api, namespace)
    assert "ray.io/rayservice-finalizer" in obj["metadata"].get("finalizers", [])
    await api.delete(harness.RAYSERVICES, namespace, NAME)

    async def gone() -> bool:
        try:
            await sample_.get(api, namespace)
        except errors.NotFound:
            return not await rayservices.cluster_names(api, namespace)
        return False

    try:  # KubeRay >= v1.6.2 removes the finalizer itself
        await harness.until(gone, 20, "the RayService deleted by KubeRay")
    except AssertionError:  # an older KubeRay leaves it to the user, as documented
        held = await sample_.get(api, namespace)
        assert held["metadata"].get("deletionTimestamp")
        assert held["metadata"]["finalizers"] == ["ray.io/rayservice-finalizer"]
        harness.kubectl(world, "-n", namespace, "patch", "rayservice", NAME, "--type=json",
                        "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]')  # fmt: skip
        await harness.until(gone, 60, "the RayService and its clusters deleted")

"""An operator's identity comes from one name (``manager.Options.name``): its Lease, its
Events' source, and its client's field manager and User-Agent, unless set one by one."""

from __future__ import annotations

import pytest

import runtime
from runtime import manager
from runtime.client import client as client_
from runtime.client import kubeconfig
from runtime.testing import fake

VERSION = runtime.__version__


def unnamed_client() -> client_.Client:
    # Nothing is sent: a client connects on its first request.
    return client_.Client(kubeconfig.Credentials(host="https://127.0.0.1:1"))


def test_the_name_is_required_and_not_empty() -> None:
    with pytest.raises(TypeError, match="name"):
        manager.Options()  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="needs a name"):
        manager.Options(name="")


def test_lease_and_event_source_derive_from_the_name_unless_set() -> None:
    derived = manager.Options(name="mirror")
    assert (derived.leader_election_id, derived.component) == ("mirror-leader", "mirror")
    assert derived == manager.Options(
        name="mirror", leader_election_id="mirror-leader", component="mirror"
    ), "a derived default is the same setting as the one written out"
    own = manager.Options(name="mirror", leader_election_id="shared-lease", component="mirrors")
    assert (own.leader_election_id, own.component) == ("shared-lease", "mirrors")


def test_the_manager_names_a_client_that_has_no_name() -> None:
    client = unnamed_client()
    assert client_.identity(client.options) == (
        "k8s-controller-runtime",
        f"k8s-controller-runtime/{VERSION}",
    ), "a client nobody named is the framework's, never an operator's"
    mgr = manager.Manager(client, manager.Options(name="mirror"))
    assert client_.identity(client.options) == (
        "mirror",
        f"mirror k8s-controller-runtime/{VERSION}",
    )
    assert mgr.events.component == "mirror"
    assert mgr.recorder("mirror") is mgr.events


def test_a_named_client_keeps_its_own_identity() -> None:
    options = client_.Options(name="writer", user_agent="writer/2.0")
    client = client_.Client(kubeconfig.Credentials(host="https://127.0.0.1:1"), options=options)
    manager.Manager(client, manager.Options(name="mirror"))
    assert client.options is options
    assert client_.identity(client.options) == ("writer", "writer/2.0")


def test_two_operators_get_two_leases_and_two_field_managers() -> None:
    a, b = unnamed_client(), unnamed_client()
    one = manager.Manager(a, manager.Options(name="one", leader_election=True))
    two = manager.Manager(b, manager.Options(name="two", leader_election=True))
    assert {one.options.leader_election_id, two.options.leader_election_id} == {
        "one-leader", "two-leader",
    }  # fmt: skip
    assert {client_.identity(a.options)[0], client_.identity(b.options)[0]} == {"one", "two"}


def test_a_fake_client_is_accepted_without_an_identity() -> None:
    mgr = manager.Manager(fake.FakeClient(), manager.Options(name="mirror"))  # type: ignore[arg-type]
    assert mgr.events.component == "mirror"


async def test_events_go_through_a_client_of_their_own_with_the_same_identity() -> None:
    options = client_.Options(qps=7, burst=9)
    client = client_.Client(kubeconfig.Credentials(host="https://127.0.0.1:1"), options=options)
    mgr = manager.Manager(client, manager.Options(name="mirror"))
    events_client = mgr.events_client
    assert events_client is not client, "Events must not spend the controllers' token bucket"
    assert events_client._buckets is not client._buckets
    assert (events_client.options.qps, events_client.options.burst) == (7, 9)
    assert client_.identity(events_client.options) == client_.identity(client.options)
    assert events_client.registry is client.registry
    assert mgr.events.client is events_client
    assert mgr.recorder("mirror-jobs").client is events_client
    await events_client.close()


def test_a_stand_in_client_sends_the_events_itself() -> None:
    client = fake.FakeClient()
    mgr = manager.Manager(client, manager.Options(name="mirror"))  # type: ignore[arg-type]
    assert mgr.events_client is client

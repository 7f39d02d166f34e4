"""The payload store against a real Azurite blob service: the inline path writes nothing, a large
payload is stored once under its content's digest and resolved back whole, a repeated write is a
no-op, and a reference is never answered with other content."""

from __future__ import annotations

import json
import time

import pytest
from azure.storage.blob import ContainerClient

from tests.helpers.request_counter import RequestCounter
from workflow_core.ledger.model import MAX_TEXT
from workflow_core.payloads import (
    PayloadMissing,
    PayloadStore,
    PayloadTooLarge,
    as_stored,
    blob_name,
    canonical_json,
    is_reference,
    message_payload,
)
from workflow_core.settings import SettingsError, StorageConnection, load_settings
from workflow_core.storage_clients import blob_container_client


@pytest.fixture
def container(azurite, unique_name):
    client = ContainerClient.from_connection_string(azurite.connection_string, unique_name("payloads"))
    client.create_container()
    yield client
    client.delete_container()
    client.close()


def big(n: int = 40_000) -> dict:
    return {"blob": "é" * 10 + "x" * n, "n": n}


def test_a_small_payload_stays_inline_and_touches_no_blob(container):
    store = PayloadStore(container)
    small = {"tenant_id": "contoso", "plan": "x" * (MAX_TEXT - 40)}
    assert store.stored(small) is small and store.resolve(small) is small
    assert list(container.list_blobs()) == []


def test_a_large_payload_is_stored_once_by_its_digest_and_resolved_whole(container):
    store = PayloadStore(container)
    value = big()
    ref = store.stored(value)
    assert is_reference(ref) and ref["size"] == len(canonical_json(value))
    assert ref == as_stored(value)  # what a reader computes without I/O: the same reference
    [blob] = list(container.list_blobs())
    assert blob.name == blob_name(ref) == "sha256/" + ref["$blob"].removeprefix("sha256:")
    assert json.loads(container.download_blob(blob.name).readall()) == value
    # a reader with its own (cold) store gets the value back
    assert PayloadStore(container).resolve(ref) == value
    # writing it again is a no-op that succeeds: the blob exists, with the same content
    assert store.stored(dict(value)) == ref and PayloadStore(container).stored(value) == ref
    assert len(list(container.list_blobs())) == 1


def test_a_repeated_write_overwrites_nothing_and_restarts_the_retention_clock(azurite, container):
    value = big()
    PayloadStore(container).stored(value)
    blob = container.get_blob_client(blob_name(as_stored(value)))
    before = blob.get_blob_properties()
    time.sleep(1.1)  # Last-Modified has a resolution of one second
    with RequestCounter() as counter:  # counts the requests of clients built inside
        fresh = blob_container_client(
            StorageConnection(connection_string=azurite.connection_string), container.container_name
        )
        assert PayloadStore(fresh).stored(value) == as_stored(value)
    # one conditional PUT, answered 409 (the content is there), then Last-Modified moved to now
    assert [(r.service, r.op, r.status) for r in counter.snapshot()] == [
        ("blob", "upload", 409),
        ("blob", "touch", 200),
    ]
    after = blob.get_blob_properties()
    assert after.last_modified > before.last_modified
    assert json.loads(blob.download_blob().readall()) == value


def test_a_reference_to_other_content_or_no_blob_is_refused(container):
    store = PayloadStore(container)
    ref = store.stored(big())
    container.upload_blob(blob_name(ref), b'{"forged":true}', overwrite=True)
    with pytest.raises(PayloadMissing, match="does not hold the content"):
        PayloadStore(container).resolve(ref)
    container.delete_blob(blob_name(ref))
    with pytest.raises(PayloadMissing, match="lifecycle rule"):
        PayloadStore(container).resolve(ref)


def test_the_limit_is_bytes_of_utf8_json():
    store = PayloadStore(None, max_bytes=1_000)
    fits = {"v": "x" * (1_000 - len(canonical_json({"v": ""})))}
    assert store.check_size(fits, "input") == 1_000
    with pytest.raises(PayloadTooLarge, match=r"input is 1,001 bytes as JSON; at most 1,000 bytes"):
        store.check_size({"v": fits["v"] + "x"}, "input")
    with pytest.raises(PayloadTooLarge):  # "é" is two bytes of UTF-8
        store.check_size({"v": "é" * 500}, "input")


def test_a_compensation_input_resolves_its_parts(container):
    store = PayloadStore(container)
    step_input, step_output = big(35_000), big(36_000)
    envelope = {"input": store.stored(step_input), "output": store.stored(step_output)}
    assert PayloadStore(container).resolve_input(envelope, "compensate") == {
        "input": step_input,
        "output": step_output,
    }
    whole = store.stored({"input": big(20_000), "output": big(20_000)})  # together over a property
    assert is_reference(whole)
    assert PayloadStore(container).resolve_input(whole, "compensate")["output"] == big(20_000)


def test_a_work_message_carries_a_reference_or_an_inline_sized_value():
    assert message_payload({"$blob": "sha256:" + "0" * 64, "size": 5}) is not None
    message_payload({"x": "y" * (MAX_TEXT - 10)})
    with pytest.raises(ValueError, match="larger ones go by blob reference"):
        message_payload({"x": "y" * MAX_TEXT})


def test_settings_name_the_limit_the_container_and_the_blob_endpoint():
    base = {"AzureWebJobsStorage": "UseDevelopmentStorage=true", "AGENT_TRANSPORT": "storage-queue"}
    settings = load_settings(base)
    assert (settings.max_payload_bytes, settings.payload_container) == (1_048_576, "sas-payloads")
    assert load_settings({**base, "MAX_PAYLOAD_BYTES": "65536"}).max_payload_bytes == 65_536
    with pytest.raises(SettingsError, match="MAX_PAYLOAD_BYTES must be at most 1048576"):
        load_settings({**base, "MAX_PAYLOAD_BYTES": "2000000"})
    with pytest.raises(SettingsError, match="PAYLOAD_CONTAINER_NAME"):
        load_settings({**base, "PAYLOAD_CONTAINER_NAME": "Bad_Name"})
    # the Durable Task Scheduler caps its messages near 1 MiB and offers Python workers no offload,
    # and the scheduler's messages carry values: the door refuses earlier
    dts = {
        **base,
        "DURABLE_TASK_SCHEDULER_CONNECTION_STRING": "Endpoint=https://s.example;Authentication=None",
    }
    assert load_settings(dts).max_payload_bytes == 262_144
    assert load_settings({**dts, "MAX_PAYLOAD_BYTES": "65536"}).max_payload_bytes == 65_536
    identity = {
        "AGENT_TRANSPORT": "storage-queue",
        "AzureWebJobsStorage__accountName": "sasdev",
        "AzureWebJobsStorage__clientId": "00000000-0000-0000-0000-000000000001",
    }
    storage = load_settings(identity).storage
    assert storage.blob_service_uri == "https://sasdev.blob.core.windows.net"
    client = blob_container_client(storage, "sas-payloads")  # the managed identity: nothing sent yet
    assert client.url == "https://sasdev.blob.core.windows.net/sas-payloads"

"""Uploads a batch through the Python client generated from docflow's
OpenAPI document, and receives and verifies its signed webhooks.

Every call to docflow goes through the generated package `docflow_client`
(`scripts/client-test.sh` generates it with openapi-python-client); the
only HTTP written here is the webhook receiver, a local http.server that
docflow posts to. Steps: register a webhook for `job.done` and
`batch.done` (its secret is in the answer), create a batch, upload three
text files into it, close it, wait for the deliveries, verify each one's
`Docflow-Signature` over the raw body, check that a tampered body and a
replay more than 300 s late are refused, and read the events with the
generated models: three `job.done` for the uploaded jobs, one `batch.done`
for the batch with 3 done; then the batch as the API shows it and the
endpoint's deliveries, all `delivered`. Exits 0 when all of it holds, else
1, saying what failed.

    python batch_and_webhook.py --url http://127.0.0.1:3980 --token <API token of an admin>
"""

import argparse
import hashlib
import hmac
import http.server
import json
import queue
import sys
import threading
import time
import uuid
from io import BytesIO

from docflow_client import AuthenticatedClient, errors
from docflow_client.api.batches import close as close_batch
from docflow_client.api.batches import create as create_batch
from docflow_client.api.batches import one as get_batch
from docflow_client.api.documents import upload_document
from docflow_client.api.webhooks import delete as delete_webhook
from docflow_client.api.webhooks import deliveries as list_deliveries
from docflow_client.api.webhooks import register as register_webhook
from docflow_client.models import (
    BatchDto,
    ErrorBody,
    NewBatch,
    NewWebhook,
    NewWebhookDto,
    UploadAccepted,
    UploadForm,
    WebhookBatchEvent,
    WebhookBatchEventType,
    WebhookJobEvent,
    WebhookJobEventType,
)
from docflow_client.types import File

# How far a signature's timestamp may be from the receiver's clock.
TOLERANCE_SECS = 300
FILES = 3


class Failed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failed(message)


def answer(result, expected, what):
    """The generated call's parsed answer, or a failure naming docflow's error."""
    if isinstance(result, ErrorBody):
        raise Failed(f"{what}: {result.error.code}: {result.error.message}")
    check(isinstance(result, expected), f"{what}: unexpected answer {result!r}")
    return result


def parse(header: str):
    """`t=<unix seconds>,v1=<hex>`: the timestamp (None when absent) and the tags."""
    t, tags = None, []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t" and value.isdigit():
            t = int(value)
        elif key == "v1":
            tags.append(value)
    return t, tags


def verify(secret: str, header: str, body: bytes, now: float) -> None:
    """Verifies `Docflow-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>` as
    a receiver must: the HMAC of "<t>.<raw body>" keyed by the endpoint's
    secret, compared in constant time, and `t` within 300 s of `now`.
    Raises ValueError with docflow's code for what is wrong."""
    t, tags = parse(header)
    if t is None or not tags:
        raise ValueError("signature_malformed")
    if abs(now - t) > TOLERANCE_SECS:
        raise ValueError("signature_expired")
    expected = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    if not any(hmac.compare_digest(expected, tag) for tag in tags):
        raise ValueError("signature_mismatch")


def refused(secret, header, body, now):
    """The code `verify` refuses with, or None when it accepts."""
    try:
        verify(secret, header, body, now)
    except ValueError as e:
        return str(e)
    return None


def start_receiver():
    """A webhook endpoint on 127.0.0.1: records each delivery's headers (read
    without regard to case, as HTTP names them) and raw body, and
    acknowledges it with 204."""
    received = queue.Queue()

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            received.put((self.headers, body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, received


def run(url: str, token: str, wait: float) -> None:
    client = AuthenticatedClient(base_url=url, token=token, raise_on_unexpected_status=True)
    receiver, received = start_receiver()
    hook_url = f"http://127.0.0.1:{receiver.server_address[1]}/docflow"
    webhook = answer(
        register_webhook.sync(
            client=client,
            body=NewWebhook(
                url=hook_url, events=["job.done", "batch.done"], description="client test"
            ),
        ),
        NewWebhookDto,
        "POST /api/webhooks",
    )
    secret = webhook.secret
    check(secret.startswith("whsec_"), f"a webhook secret starts with whsec_: {secret!r}")
    try:
        batch = answer(
            create_batch.sync(client=client, body=NewBatch(name="client test")),
            BatchDto,
            "POST /api/batches",
        )
        jobs = set()
        run_id = uuid.uuid4()
        for i in range(FILES):
            text = f"Client test {run_id}, document {i}: quarterly revenue grew.\n".encode()
            accepted = answer(
                # The form's `batch_id` (the generated client sends it after
                # `file`, which docflow accepts).
                upload_document.sync(
                    client=client,
                    body=UploadForm(
                        batch_id=uuid.UUID(batch.id),
                        file=File(
                            payload=BytesIO(text), file_name=f"note-{i}.txt", mime_type="text/plain"
                        ),
                    ),
                ),
                UploadAccepted,
                "POST /api/documents",
            )
            jobs.add(accepted.job_id)
        closed = answer(close_batch.sync(uuid.UUID(batch.id), client=client), BatchDto, "close")
        check(closed.total == FILES, f"the closed batch holds {FILES} jobs: {closed.total}")

        # Three job.done and one batch.done, in any order.
        deliveries = []
        deadline = time.monotonic() + wait
        while len(deliveries) < FILES + 1:
            left = deadline - time.monotonic()
            check(left > 0, f"{FILES + 1} deliveries within {wait:.0f} s; got {len(deliveries)}")
            try:
                deliveries.append(received.get(timeout=left))
            except queue.Empty:
                pass

        seen_jobs, batch_events = set(), []
        for headers, body in deliveries:
            signature = headers.get("Docflow-Signature", "")
            now = time.time()
            code = refused(secret, signature, body, now)
            check(code is None, f"a delivery's signature verifies: {code} ({signature})")
            t, _ = parse(signature)
            tampered = body.replace(b'"done"', b'"failed"', 1)
            check(tampered != body, f"a delivery says done: {body!r}")
            check(
                refused(secret, signature, tampered, now) == "signature_mismatch",
                "a tampered body is refused",
            )
            check(
                refused(secret, signature, body, t + TOLERANCE_SECS + 1) == "signature_expired",
                "the same delivery replayed 301 s later is refused",
            )
            check(
                refused("whsec_other", signature, body, now) == "signature_mismatch",
                "another secret is refused",
            )
            check(
                refused(secret, f"v1={'0' * 64}", body, now) == "signature_malformed",
                "a header without t is malformed",
            )

            kind = headers.get("Docflow-Event-Type")
            event = (WebhookBatchEvent if kind == "batch.done" else WebhookJobEvent).from_dict(
                json.loads(body)
            )
            check(
                headers.get("Docflow-Event-Id") == str(event.id),
                "Docflow-Event-Id is the body's id",
            )
            check(
                event.type_ == kind, f"Docflow-Event-Type {kind} is the body's type {event.type_}"
            )
            if event.type_ == WebhookJobEventType.JOB_DONE:
                check(event.data.state == "done", f"job.done's job is done: {event.data.state}")
                seen_jobs.add(event.data.id)
            else:
                check(
                    event.type_ == WebhookBatchEventType.BATCH_DONE,
                    f"an event subscribed to: {event.type_}",
                )
                batch_events.append(event)

        check(
            seen_jobs == jobs,
            f"job.done for each uploaded job: {sorted(seen_jobs)} vs {sorted(jobs)}",
        )
        check(len(batch_events) == 1, f"one batch.done: {len(batch_events)}")
        done = batch_events[0].data
        check(done.id == batch.id, f"batch.done's data.id is the batch: {done.id} vs {batch.id}")
        check(done.state == "done", f"the batch is done: {done.state}")
        counts = done.counts
        check(
            (counts.done, counts.failed, counts.cancelled, done.total) == (FILES, 0, 0, FILES),
            f"batch.done counts {FILES} done of {FILES}: {counts.to_dict()}, total {done.total}",
        )
        shown = answer(
            get_batch.sync(uuid.UUID(batch.id), client=client), BatchDto, "GET /api/batches/{id}"
        )
        check(
            shown.counts.done == FILES and shown.state == "done",
            f"the batch as the API shows it: {shown.to_dict()}",
        )
        # docflow records each 204 just after the receiver answered it.
        deadline = time.monotonic() + 10
        while True:
            log = list_deliveries.sync(uuid.UUID(webhook.id), client=client)
            check(isinstance(log, list), f"GET /api/webhooks/{{id}}/deliveries: {log!r}")
            states = sorted(d.state for d in log)
            if states == ["delivered"] * (FILES + 1):
                break
            check(
                time.monotonic() < deadline,
                f"the endpoint's {FILES + 1} deliveries are delivered: {states}",
            )
            time.sleep(0.2)
        gone = delete_webhook.sync(uuid.UUID(webhook.id), client=client)
        check(not isinstance(gone, ErrorBody), f"DELETE /api/webhooks/{{id}}: {gone!r}")
        print(
            f"batch {batch.id}: {FILES} uploads done; {len(deliveries)} "
            "deliveries received, each signature verified, a tampered body and a late replay refused"
        )
    finally:
        receiver.shutdown()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="docflow's origin, e.g. http://127.0.0.1:3980")
    p.add_argument("--token", required=True, help="an API token of an admin (docflow token create)")
    p.add_argument("--wait", type=float, default=90, help="seconds to wait for the deliveries")
    args = p.parse_args()
    try:
        run(args.url, args.token, args.wait)
    except (Failed, errors.UnexpectedStatus) as e:
        print(f"client test FAILED: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

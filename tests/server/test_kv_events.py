#!/usr/bin/env python3
"""KV events (`tessera serve --kv-events`): what a KV-aware router subscribes to. A ZeroMQ SUB
socket sees BlockStored for a prompt's full blocks, with the hashes docs/scale-out.md defines
(recomputed here from the token ids), and BlockRemoved when a cached block is taken for other
content; a subscriber that joins late gets every batch from the replay socket.

Usage: test_kv_events.py TESSERA_BIN_DIR
pyzmq and msgpack (requirements.txt) are needed: without them the test exits 77 (CTest: skipped);
under CI=true that is a failure (exit 1).
"""
import json
import os
import socket
import sys
import time
import unittest

try:
    import msgpack
    import zmq
except ImportError as e:
    print(f"SKIP: {e.name} is not installed (pip install -r requirements.txt)")
    sys.exit(1 if os.environ.get("CI") == "true" else 77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HOST, Server  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("TESSERA_BIN", "build/bin")
BLOCK = 16
M64 = (1 << 64) - 1


# The block-hash contract of docs/scale-out.md, written from the document.
def _mix(h, v):
    x = h ^ ((v + 0x9E3779B97F4A7C15 + ((h << 6) & M64) + (h >> 2)) & M64)
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def block_hash(parent, tokens, lora_id=0):
    h = _mix(0x7E55E7A000000001, parent or 0)
    if lora_id:  # the adapter the K/V was computed under, mixed into every block
        h = _mix(h, 0x10BA000000000000 | (lora_id & 0xFFFFFFFF))
    for t in tokens:
        h = _mix(h, t & 0xFFFFFFFF)
    return h or 1


def prompt_hashes(tokens, lora_id=0):
    out, parent = [], 0
    for i in range(len(tokens) // BLOCK):
        parent = block_hash(parent, tokens[i * BLOCK:(i + 1) * BLOCK], lora_id)
        out.append(parent)
    return out


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def decode(frames):
    """[topic, seq, payload] -> (seq, events)."""
    topic, seq, payload = frames
    ts, events, dp_rank = msgpack.unpackb(payload, raw=False)
    assert isinstance(ts, float) and ts > 1.6e9, ts
    assert dp_rank == 0
    return int.from_bytes(seq, "big"), events


class KvEvents(unittest.TestCase):
    def setUp(self):
        self.ctx = zmq.Context()
        self.pub_port, self.replay_port = free_port(), free_port()
        # 64 tokens of KV: 4 blocks, so a second 40-token prompt must evict the first's blocks.
        self.server = Server(BIN, "-c", "64", "--kv-events", f"tcp://{HOST}:{self.pub_port}",
                             "--kv-events-replay", f"tcp://{HOST}:{self.replay_port}", "--kv-events-topic", "kv@test@tiny")

    def tearDown(self):
        self.server.stop()
        self.ctx.destroy(linger=0)

    def subscribe(self):
        sub = self.ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(f"tcp://{HOST}:{self.pub_port}")
        return sub

    def receive_until(self, sub, want, timeout=20):
        """Batches (seq, events) until |want|(all events so far) holds, within |timeout| s."""
        got = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            if sub.poll(100):
                frames = sub.recv_multipart()
                self.assertEqual(frames[0], b"kv@test@tiny")
                got.append(decode(frames))
                if want([e for _, evs in got for e in evs]):
                    return got
        self.fail(f"timed out; received {got}")

    def complete(self, prompt):
        status, _, body = self.server.post("/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 4,
                                                               "ignore_eos": True, "temperature": 0})
        self.assertEqual(status, 200, json.dumps(body))

    def check_stored(self, events, prompt):
        """The BlockStored events that name |prompt|'s blocks chain them from no parent, with the
        documented hashes, the blocks' token ids, the block size, no LoRA and the device tier.
        (A prompt's blocks stored in one step arrive as one event.)"""
        want = prompt_hashes(prompt)
        hashes, parents, tokens = [], [], []
        for e in events:
            if e[0] == "BlockStored" and e[1][0] in want:
                self.assertEqual(len(e), 7, e)
                self.assertEqual(e[4:], [BLOCK, None, "GPU"])
                self.assertEqual(len(e[3]), BLOCK * len(e[1]))
                parents.append(e[2])
                hashes += e[1]
                tokens += e[3]
        self.assertEqual(hashes, want)
        self.assertEqual(tokens, prompt[:BLOCK * len(want)])
        self.assertEqual(parents[0], None, "the first block has no parent")

    def test_stored_removed_and_replay(self):
        sub = self.subscribe()
        time.sleep(0.5)  # ZeroMQ's slow joiner: the subscription reaches the publisher first
        a = list(range(100, 140))  # 40 tokens: 2 full blocks
        b = list(range(200, 240))
        ha, hb = prompt_hashes(a), prompt_hashes(b)

        self.complete(a)
        got = self.receive_until(sub, lambda evs: any(e[0] == "BlockStored" and ha[-1] in e[1] for e in evs))
        self.check_stored([e for _, evs in got for e in evs], a)

        self.complete(b)  # needs 3 of the 4 blocks: the oldest cached block of |a| is reused
        got += self.receive_until(sub, lambda evs: any(e[0] == "BlockRemoved" and ha[0] in e[1] for e in evs)
                                  and any(e[0] == "BlockStored" and hb[-1] in e[1] for e in evs))
        events = [e for _, evs in got for e in evs]
        removed = [h for e in events if e[0] == "BlockRemoved" for h in e[1]]
        self.assertIn(ha[0], removed)
        self.assertTrue(all(e[-1] == "GPU" for e in events if e[0] == "BlockRemoved"))
        self.check_stored(events, b)
        seqs = [s for s, _ in got]
        self.assertEqual(seqs, list(range(seqs[0], seqs[0] + len(seqs))), "sequence numbers count up by one")

        # A subscriber that joins now asks the replay socket for everything from 0.
        late = self.subscribe()
        replay = self.ctx.socket(zmq.DEALER)
        replay.connect(f"tcp://{HOST}:{self.replay_port}")
        replay.send_multipart([b"", (0).to_bytes(8, "big")])
        replayed = []
        deadline = time.time() + 20
        while time.time() < deadline:
            self.assertTrue(replay.poll(5000), "the replay socket answered")
            empty, seq, payload = replay.recv_multipart()
            self.assertEqual(empty, b"")
            if seq == b"\xff" * 8:
                break
            replayed.append(decode([b"", seq, payload]))
        else:
            self.fail("no end-of-replay marker")
        self.assertEqual([s for s, _ in replayed], list(range(len(replayed))), "every batch from 0, in order")
        self.assertEqual(replayed[0][1], [["AllBlocksCleared"]], "a fresh process starts with an empty cache")
        by_seq = dict(replayed)
        for s, evs in got:
            self.assertEqual(by_seq[s], evs, f"replayed batch {s} equals the published one")
        late.close()
        replay.close()
        sub.close()


class KvEventsOff(unittest.TestCase):
    def test_off_by_default(self):
        self.assertNotIn("KV events", Server(BIN).stop())


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])

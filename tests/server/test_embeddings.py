#!/usr/bin/env python3
"""POST /v1/embeddings through the official openai client: all-MiniLM-L6-v2 served by
`tessera serve`, its vectors against the numpy BERT oracle (tests/python/numpy_bert.py), the
float and base64 encodings, token-id inputs, usage.prompt_tokens; a decoder without pooling
answers 400 naming why, and with --pooling last it embeds.

Usage: test_embeddings.py TESSERA_BIN_DIR MODELS_DIR
Exits 77 (CTest: skipped) when the model is missing; under CI=true that is a failure.
"""
import base64
import os
import re
import subprocess
import sys
import unittest

import numpy as np
import openai

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import numpy_bert  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else "build/bin"
MODELS = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("TESSERA_MODELS", "models-cache")
MINILM = os.path.join(MODELS, "all-MiniLM-L6-v2")
SMOLLM2 = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
for path in (MINILM, SMOLLM2):
    if not os.path.exists(path):
        print(f"SKIP: [missing] {path} (.ci/fetch-model fetches it)")
        sys.exit(1 if os.environ.get("CI") == "true" else 77)

TEXTS = ["A man is eating food.", "A man is riding a horse.", "The quick brown fox jumps over the lazy dog!",
         "Paris is the capital and most populous city of France."]


def serve(model, name, *extra):
    proc = subprocess.Popen([os.path.join(BIN, "tessera"), "serve", "-m", model, "-d", "cpu", "--host", "127.0.0.1",
                             "--port", "0", "--model-name", name, "-c", "2048", *extra],
                            stdout=subprocess.PIPE, text=True)
    m = re.match(r"listening on [0-9.]+:(\d+)", proc.stdout.readline())
    if not m:
        proc.kill()
        raise RuntimeError("the server did not start")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{m.group(1)}/v1", api_key="none", max_retries=0, timeout=300)
    return proc, client


def stop(proc):
    proc.terminate()
    proc.wait(60)
    proc.stdout.close()


class MiniLM(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, cls.client = serve(MINILM, "minilm")
        cls.enc = numpy_bert.Encoder(MINILM)

    @classmethod
    def tearDownClass(cls):
        stop(cls.proc)

    def check(self, vectors, texts):
        for v, t in zip(vectors, texts):
            want = self.enc.embed(t)
            cos = float(np.dot(v, want) / (np.linalg.norm(v) * np.linalg.norm(want)))
            self.assertGreater(cos, 0.999, t)

    def test_batch_of_strings(self):
        r = self.client.embeddings.create(model="minilm", input=TEXTS)
        self.assertEqual(r.object, "list")
        self.assertEqual(r.model, "minilm")
        self.assertEqual([d.index for d in r.data], list(range(len(TEXTS))))
        self.assertTrue(all(len(d.embedding) == 384 for d in r.data))
        self.check([np.array(d.embedding) for d in r.data], TEXTS)
        self.assertEqual(r.usage.prompt_tokens, sum(len(self.enc.ids(t)) for t in TEXTS))
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens)

    def test_single_string_and_base64(self):
        # The client asks for base64 itself unless told otherwise, and decodes it: both paths.
        f = self.client.embeddings.create(model="minilm", input=TEXTS[0], encoding_format="float")
        b = self.client.embeddings.create(model="minilm", input=TEXTS[0])
        self.assertEqual(len(f.data), 1)
        np.testing.assert_allclose(np.array(f.data[0].embedding), np.array(b.data[0].embedding), rtol=0, atol=1e-6)
        raw = self.client.embeddings.with_raw_response.create(model="minilm", input=TEXTS[0], encoding_format="base64")
        enc = raw.http_response.json()["data"][0]["embedding"]
        self.assertIsInstance(enc, str)
        decoded = np.frombuffer(base64.b64decode(enc), dtype="<f4")
        np.testing.assert_array_equal(decoded, np.array(f.data[0].embedding, dtype=np.float32))
        self.check([decoded], TEXTS[:1])

    def test_token_inputs(self):
        ids = [self.enc.ids(t) for t in TEXTS[:2]]
        r = self.client.embeddings.create(model="minilm", input=ids, encoding_format="float")
        self.check([np.array(d.embedding) for d in r.data], TEXTS[:2])
        r1 = self.client.embeddings.create(model="minilm", input=ids[0], encoding_format="float")
        self.check([np.array(r1.data[0].embedding)], TEXTS[:1])
        self.assertEqual(r1.usage.prompt_tokens, len(ids[0]))

    def test_errors(self):
        with self.assertRaises(openai.NotFoundError):
            self.client.embeddings.create(model="other", input="x")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.embeddings.create(model="minilm", input="x " * 600)
        self.assertIn("512", str(e.exception))
        with self.assertRaises(openai.BadRequestError):
            self.client.embeddings.create(model="minilm", input=[], encoding_format="float")
        with self.assertRaises(openai.BadRequestError):
            self.client.embeddings.create(model="minilm", input="x", dimensions=8)
        # An encoder cannot complete text: a 400 that says so.
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="minilm", prompt="hello", max_tokens=2)
        self.assertIn("encoder", str(e.exception))


class Decoder(unittest.TestCase):
    def test_without_pooling_is_400_naming_why(self):
        proc, client = serve(SMOLLM2, "smollm2")
        try:
            with self.assertRaises(openai.BadRequestError) as e:
                client.embeddings.create(model="smollm2", input="hello")
            self.assertIn("pooling", str(e.exception))
        finally:
            stop(proc)

    def test_last_token_pooling(self):
        proc, client = serve(SMOLLM2, "smollm2", "--pooling", "last")
        try:
            r = client.embeddings.create(model="smollm2", input=["The cat sat.", "The cat sat.", "Stocks fell sharply."],
                                         encoding_format="float")
            v = np.array([d.embedding for d in r.data])
            self.assertEqual(v.shape, (3, 576))
            np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
            np.testing.assert_allclose(v[0], v[1], atol=1e-5)  # the same text, batched together
            # And a chat completion still works on the same engine.
            c = client.completions.create(model="smollm2", prompt="The capital of France is", max_tokens=2, temperature=0)
            self.assertTrue(c.choices[0].text)
        finally:
            stop(proc)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)

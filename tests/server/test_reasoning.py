#!/usr/bin/env python3
"""The reasoning split through tessera serve (issue 39): reasoning_content beside content.

A tiny random Qwen3.5 (tests/model/qwen35/make_qwen35.py) with Qwen3.5's own chat template, whose
generation prompt opens a thinking block ("<think>\\n"; enable_thinking=false closes it at once).
Greedy, ignore_eos, so every run's tokens are known from a run with the split off:
  - the split (reasoning_format auto) equals an independent Python split of the raw text
    (reasoning_format none), in full responses and in the concatenated stream deltas;
  - reasoning_budget N: the reasoning is the first N tokens' text, then "\n</think>\n\n" is
    forced (its newline ends the reasoning), and the answer follows as content;
  - chat_template_kwargs {"enable_thinking": false} and reasoning_budget 0: no reasoning;
  - a JSON schema with a budget: the model thinks, then the content is JSON of the schema;
  - bad reasoning options: 400 naming the field.
Usage: test_reasoning.py TESSERA_BIN_DIR
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import Server  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else "build/bin"
# Qwen3.5's own chat template (tests/data/chat_templates/qwen35.jinja).
with open(os.path.join(HERE, "..", "data", "chat_templates", "qwen35.jinja"), encoding="utf-8") as _f:
    TEMPLATE = _f.read()
MESSAGES = [{"role": "user", "content": "What is two and two?"}]


def make_model():
    out = tempfile.mkdtemp(prefix="tessera_reasoning_")
    subprocess.run([sys.executable, os.path.join(HERE, "..", "model", "qwen35", "make_qwen35.py"), "--out", out,
                    "--no-vision", "--no-mtp", "--chat-template", TEMPLATE], check=True, stdout=subprocess.DEVNULL)
    return os.path.join(out, "tiny-qwen35-nomtp-f32.gguf")


def split(raw):
    """The reference split for a prompt that opened the thinking block."""
    if "</think>" not in raw:
        return raw, ""
    r, c = raw.split("</think>", 1)
    return r, c.lstrip(" \t\r\n")


class Reasoning(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(BIN, model=make_model())

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def chat(self, max_tokens=40, **extra):
        body = {"model": "tiny", "messages": MESSAGES, "temperature": 0, "max_tokens": max_tokens, "ignore_eos": True}
        body.update(extra)
        status, _, r = self.server.post("/v1/chat/completions", body)
        self.assertEqual(status, 200, r)
        return r

    def stream(self, **extra):
        body = {"model": "tiny", "messages": MESSAGES, "temperature": 0, "max_tokens": 40, "ignore_eos": True,
                "stream": True}
        body.update(extra)
        _, _, text = self.server.raw("POST", "/v1/chat/completions", json.dumps(body))
        reasoning, content, n_reasoning_chunks = "", "", 0
        for line in text.splitlines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            delta = json.loads(line[6:])["choices"][0]["delta"]
            if delta.get("reasoning_content"):
                reasoning += delta["reasoning_content"]
                n_reasoning_chunks += 1
            content += delta.get("content") or ""
        return reasoning, content, n_reasoning_chunks

    def test_split_matches_the_raw_text(self):
        raw = self.chat(reasoning_format="none")["choices"][0]["message"]
        self.assertNotIn("reasoning_content", raw)
        want_r, want_c = split(raw["content"])
        got = self.chat()["choices"][0]["message"]
        self.assertGreater(len(want_r), 0)
        self.assertEqual(got["reasoning_content"], want_r)
        self.assertEqual(got["content"], want_c)
        r, c, chunks = self.stream()
        self.assertEqual((r, c), (want_r, want_c))
        self.assertGreater(chunks, 1, "the reasoning streams as it comes")

    def test_budget_forces_the_close_tag(self):
        free = self.chat(reasoning_format="none")["choices"][0]["message"]["content"]
        for budget in (1, 6):
            r = self.chat(reasoning_budget=budget)
            msg = r["choices"][0]["message"]
            # The budget's tokens, then the forced "\n</think>\n\n" whose newline ends the reasoning.
            self.assertTrue(msg["reasoning_content"].endswith("\n"), msg)
            thought = msg["reasoning_content"][:-1]
            self.assertTrue(free.startswith(thought), (budget, msg, free))
            first_n = self.chat(max_tokens=budget, reasoning_format="none")["choices"][0]["message"]["content"]
            self.assertEqual(thought, first_n)  # exactly |budget| tokens of thought
            self.assertGreater(len(msg["content"]), 0, msg)
            self.assertEqual(r["usage"]["completion_tokens"], 40)
            raw = self.chat(reasoning_budget=budget, reasoning_format="none")["choices"][0]["message"]["content"]
            self.assertIn("\n</think>\n\n", raw)
            self.assertEqual(split(raw), (msg["reasoning_content"], msg["content"]))

    def test_thinking_off(self):
        for extra in ({"chat_template_kwargs": {"enable_thinking": False}}, {"reasoning_budget": 0}):
            msg = self.chat(**extra)["choices"][0]["message"]
            self.assertIsNone(msg["reasoning_content"], extra)
            self.assertGreater(len(msg["content"]), 0)

    def test_schema_after_thinking(self):
        schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
                  "required": ["n"], "additionalProperties": False}
        r = self.chat(max_tokens=200, reasoning_budget=8, ignore_eos=False,
                      response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}})
        msg = r["choices"][0]["message"]
        self.assertGreater(len(msg["reasoning_content"]), 0)
        value = json.loads(msg["content"])
        self.assertIsInstance(value["n"], int)
        self.assertEqual(r["choices"][0]["finish_reason"], "stop")

    def test_bad_options(self):
        for extra, param in (({"reasoning_format": "bogus"}, "reasoning_format"),
                             ({"reasoning_budget": -5}, "reasoning_budget"),
                             ({"reasoning_budget": "10"}, "reasoning_budget"),
                             ({"chat_template_kwargs": [1]}, "chat_template_kwargs"),
                             ({"chat_template_kwargs": {"messages": []}}, "messages")):
            body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 4}
            body.update(extra)
            status, _, r = self.server.post("/v1/chat/completions", body)
            self.assertEqual(status, 400, (extra, r))
            self.assertIn(param, json.dumps(r["error"]), (extra, r))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)

#!/usr/bin/env python3
"""Structured output through tessera serve with SmolLM2-135M-Instruct (issue 17).

200 chat requests over 5 JSON schemas (nested objects, arrays, enums, numbers, strings with
patterns) at concurrency 16: every reply must parse and validate (jsonschema). Then the official
openai client's response_format (json_object, json_schema) and tools (tool_choice required, named,
streamed), invalid schemas and grammars (400 naming the error), regex and EBNF through Tessera's
structured_outputs extension, and the mask time per token from /metrics.

Usage: test_structured.py TESSERA_BIN_DIR MODELS_DIR
Exits 77 (CTest: skipped) when the model or a package is missing; under CI=true that is a failure.
A build without XGrammar must refuse response_format with a 400 that says why; that is all it checks.
"""
import concurrent.futures
import json
import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server  # noqa: E402

CI = os.environ.get("CI") == "true"
try:
    import jsonschema
    import openai
except ImportError as e:
    print(f"SKIP: {e.name} is not installed (pip install -r requirements.txt)")
    sys.exit(1 if CI else 77)

BIN = sys.argv[1] if len(sys.argv) > 1 else "build/bin"
MODELS = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("TESSERA_MODELS", "models-cache")
MODEL = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
if not os.path.exists(MODEL):
    print(f"SKIP: {MODEL} not found")
    sys.exit(1 if CI else 77)

N_REQUESTS = int(os.environ.get("TESSERA_STRUCTURED_REQUESTS", "200"))
CONCURRENCY = 16

SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "pattern": "^[A-Z][a-z]{1,11}$"},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "address": {
                "type": "object",
                "properties": {"city": {"type": "string", "pattern": "^[A-Za-z ]{1,16}$"},
                               "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city", "zip"], "additionalProperties": False},
        },
        "required": ["name", "age", "address"], "additionalProperties": False,
    },
    "order": {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 1, "maximum": 99999},
            "items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
                "type": "object",
                "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
                               "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
                "required": ["sku", "qty"], "additionalProperties": False}},
            "status": {"type": "string", "enum": ["pending", "shipped", "delivered"]},
        },
        "required": ["id", "items", "status"], "additionalProperties": False,
    },
    "weather": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "pattern": "^[A-Za-z ]{1,16}$"},
            "temperature": {"type": "number", "minimum": -50, "maximum": 60},
            "conditions": {"type": "string", "enum": ["sunny", "cloudy", "rain", "snow"]},
            "humid": {"type": "boolean"},
        },
        "required": ["city", "temperature", "conditions", "humid"], "additionalProperties": False,
    },
    "article": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "pattern": "^[A-Za-z ]{1,24}$"},
            "tags": {"type": "array", "maxItems": 3,
                     "items": {"type": "string", "enum": ["news", "tech", "sport", "science"]}},
            "score": {"type": "number", "minimum": 0, "maximum": 10},
        },
        "required": ["title", "tags", "score"], "additionalProperties": False,
    },
    "event": {
        "type": "object",
        "properties": {
            "date": {"type": "string", "pattern": "^2026-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9])$"},
            "attendees": {"type": "array", "minItems": 1, "maxItems": 2, "items": {
                "type": "object",
                "properties": {"name": {"type": "string", "pattern": "^[A-Z][a-z]{1,9}$"},
                               "role": {"type": "string", "enum": ["host", "guest", "speaker"]}},
                "required": ["name", "role"], "additionalProperties": False}},
            "location": {"type": "object",
                         "properties": {"lat": {"type": "number", "minimum": -90, "maximum": 90},
                                        "lon": {"type": "number", "minimum": -180, "maximum": 180}},
                         "required": ["lat", "lon"], "additionalProperties": False},
        },
        "required": ["date", "attendees", "location"], "additionalProperties": False,
    },
}
PROMPTS = {
    "person": "Describe a person as JSON: name, age and address.",
    "order": "Write a shop order as JSON with an id, items and a status.",
    "weather": "Give today's weather in a city as JSON.",
    "article": "Describe a news article as JSON with a title, tags and a score.",
    "event": "Describe a meeting as JSON: its date, attendees and location.",
}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "pattern": "^[A-Za-z ]{1,16}$"},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "The current time in a time zone.",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET", "PST"]}},
                   "required": ["zone"], "additionalProperties": False}}}


class Structured(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(BIN, "-c", "8192", model=MODEL)
        cls.client = openai.OpenAI(base_url=cls.server.base_url, api_key="none", max_retries=0, timeout=600)
        status, _, body = cls.server.post("/v1/chat/completions", {
            "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
            "response_format": {"type": "json_object"}})
        cls.available = status == 200
        cls.refusal = body

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        if not self.available:
            # A build without XGrammar: the refusal must say why, and nothing else is checked.
            msg = self.refusal["error"]["message"]
            self.assertIn("XGrammar", msg)
            if CI:
                self.fail("CI=true and this tessera serve has no structured output: " + msg)
            self.skipTest(msg)

    def chat(self, name, seed):
        r = self.client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": PROMPTS[name]}], max_tokens=160, temperature=0.8,
            seed=seed, response_format={"type": "json_schema",
                                        "json_schema": {"name": name, "schema": SCHEMAS[name], "strict": True}})
        return r.choices[0]

    def test_a_200_requests_5_schemas_concurrency_16_all_valid(self):
        names = sorted(SCHEMAS)
        jobs = [(names[i % len(names)], 1000 + i) for i in range(N_REQUESTS)]
        start = time.time()
        with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as pool:
            choices = list(pool.map(lambda j: self.chat(*j), jobs))
        elapsed = time.time() - start
        bad = []
        tokens = 0
        for (name, seed), c in zip(jobs, choices):
            try:
                jsonschema.validate(json.loads(c.message.content), SCHEMAS[name])
                if c.finish_reason != "stop":
                    raise ValueError("finish_reason " + c.finish_reason)
            except Exception as e:  # noqa: BLE001 (every failure is reported, with the reply)
                bad.append(f"{name} seed {seed}: {type(e).__name__}: {str(e)[:200]} in {c.message.content!r}")
        m = self.server.metrics()
        masks = m.get("tessera_grammar_masks_total", 0)
        print(f"{N_REQUESTS} requests, 5 schemas, concurrency {CONCURRENCY}: {N_REQUESTS - len(bad)} valid, "
              f"{elapsed:.1f} s; {int(masks)} masks, mean "
              f"{1e3 * m['tessera_grammar_mask_seconds_total'] / max(masks, 1):.3f} ms, "
              f"p99 {1e3 * m['tessera_grammar_mask_seconds_p99']:.2f} ms, "
              f"max {1e3 * m['tessera_grammar_mask_seconds_max']:.2f} ms per token")
        for name in names:
            print(f"  {name}: {choices[names.index(name)].message.content}")
        self.assertEqual(bad, [], "\n".join(bad[:10]))
        self.assertGreater(masks, N_REQUESTS * 10)

    def test_json_object_mode(self):
        r = self.client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "List two colours as JSON."}], max_tokens=120,
            temperature=0, response_format={"type": "json_object"})
        c = r.choices[0]
        self.assertIn(c.finish_reason, ("stop", "length"))
        if c.finish_reason == "stop":
            self.assertIsInstance(json.loads(c.message.content), dict)
        else:
            self.assertTrue(c.message.content.startswith("{"), c.message.content)

    def test_tools_required_named_and_streamed(self):
        msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
        r = self.client.chat.completions.create(model="tiny", messages=msgs, tools=[WEATHER_TOOL, TIME_TOOL],
                                                tool_choice="required", max_tokens=80, temperature=0)
        c = r.choices[0]
        self.assertEqual(c.finish_reason, "tool_calls")
        self.assertIsNone(c.message.content)
        call = c.message.tool_calls[0]
        self.assertEqual(call.type, "function")
        self.assertIn(call.function.name, ("get_weather", "get_time"))
        tool = WEATHER_TOOL if call.function.name == "get_weather" else TIME_TOOL
        jsonschema.validate(json.loads(call.function.arguments), tool["function"]["parameters"])
        print("required:", call.function.name, call.function.arguments)

        r = self.client.chat.completions.create(model="tiny", messages=msgs, tools=[WEATHER_TOOL, TIME_TOOL],
                                                tool_choice={"type": "function", "function": {"name": "get_time"}},
                                                max_tokens=80, temperature=0)
        call = r.choices[0].message.tool_calls[0]
        self.assertEqual(call.function.name, "get_time")
        jsonschema.validate(json.loads(call.function.arguments), TIME_TOOL["function"]["parameters"])

        # The call and its result go back as history; the model answers with text.
        follow = msgs + [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                         {"role": "tool", "tool_call_id": call.id, "content": "12:00"}]
        r = self.client.chat.completions.create(model="tiny", messages=follow, tools=[TIME_TOOL], tool_choice="none",
                                                max_tokens=8, temperature=0)
        self.assertIsInstance(r.choices[0].message.content, str)

        # Streamed, the call opens with its id and name as soon as the name is complete and its
        # arguments follow in fragments (as vLLM streams them) that join to the unstreamed call's.
        whole = self.client.chat.completions.create(model="tiny", messages=msgs, tools=[WEATHER_TOOL],
                                                    tool_choice="required", max_tokens=80, temperature=0)
        stream = self.client.chat.completions.create(model="tiny", messages=msgs, tools=[WEATHER_TOOL],
                                                     tool_choice="required", max_tokens=80, temperature=0, stream=True)
        calls, finish, deltas = {}, None, 0
        for chunk in stream:
            for ch in chunk.choices:
                for tc in ch.delta.tool_calls or []:
                    deltas += 1
                    if tc.id:
                        self.assertNotIn(tc.index, calls)
                        calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments or ""}
                    else:
                        self.assertIsNone(tc.function.name)
                        calls[tc.index]["arguments"] += tc.function.arguments
                finish = ch.finish_reason or finish
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(list(calls), [0])
        self.assertEqual(calls[0]["name"], "get_weather")
        args = json.loads(calls[0]["arguments"])
        jsonschema.validate(args, WEATHER_TOOL["function"]["parameters"])
        self.assertEqual(args, json.loads(whole.choices[0].message.tool_calls[0].function.arguments))
        self.assertGreater(deltas, 1, "the arguments stream in fragments")

    def test_tool_choice_auto_is_a_call_or_text(self):
        r = self.client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "What time is it in UTC?"}], tools=[TIME_TOOL],
            max_tokens=40, temperature=0)
        c = r.choices[0]
        if c.message.tool_calls:  # unconstrained: the model may or may not call
            self.assertEqual(c.finish_reason, "tool_calls")
            self.assertEqual(c.message.tool_calls[0].function.name, "get_time")
            json.loads(c.message.tool_calls[0].function.arguments)
        else:
            self.assertIsInstance(c.message.content, str)
        print("auto:", c.finish_reason, c.message.tool_calls or repr(c.message.content))

    def test_regex_and_ebnf_extension(self):
        r = self.client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "A phone number?"}], max_tokens=30, temperature=0.8,
            seed=3, extra_body={"structured_outputs": {"regex": r"\+1-[0-9]{3}-[0-9]{4}"}})
        self.assertRegex(r.choices[0].message.content, r"^\+1-[0-9]{3}-[0-9]{4}$")
        r = self.client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Yes or no?"}], max_tokens=10, temperature=0.8, seed=4,
            extra_body={"structured_outputs": {"grammar": 'root ::= ("yes" | "no") "."'}})
        self.assertIn(r.choices[0].message.content, ("yes.", "no."))

    def test_invalid_inputs_are_400_naming_the_error(self):
        cases = [
            ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "no-such-type"}}}},
             "response_format.json_schema.schema"),
            ({"structured_outputs": {"grammar": "root ::= undefined_rule"}}, "structured_outputs.grammar"),
            ({"structured_outputs": {"regex": "(ab"}}, "structured_outputs.regex"),
            ({"response_format": {"type": "xml"}}, "response_format.type"),
            ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ]
        for extra, param in cases:
            status, _, body = self.server.post("/v1/chat/completions", {
                "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra})
            self.assertEqual(status, 400, body)
            self.assertEqual(body["error"]["param"], param, body)
            print(f"400 {param}: {body['error']['message'][:160]}")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "no-such-type"}}})
        self.assertIn("json_schema", str(e.exception))

    def test_completions_route_too(self):
        status, _, body = self.server.post("/v1/completions", {
            "model": "tiny", "prompt": "The answer is", "max_tokens": 8, "temperature": 0,
            "structured_outputs": {"regex": "(yes|no)"}})
        self.assertEqual(status, 200, body)
        self.assertIn(body["choices"][0]["text"], ("yes", "no"))
        # A key given as null is absent (OpenAI clients send unset fields as null): this regex constrains,
        # not the null json_object beside it.
        status, _, body = self.server.post("/v1/completions", {
            "model": "tiny", "prompt": "The answer is", "max_tokens": 8, "temperature": 0,
            "structured_outputs": {"regex": "(yes|no)", "json_object": None}})
        self.assertEqual(status, 200, body)
        self.assertIn(body["choices"][0]["text"], ("yes", "no"))


class StructuredSpeculative(unittest.TestCase):
    """Structured output under n-gram speculation (one grammar mask per draft position): greedy
    replies equal the same server's replies with speculation off for the request (spec_k 0), and
    sampled ones still validate."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server(BIN, "-c", "8192", "--spec", "ngram", "--spec-no-cost-gate", model=MODEL)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def reply(self, name, spec_k, temperature=0.0, seed=1):
        status, _, body = self.server.post("/v1/chat/completions", {
            "model": "tiny", "messages": [{"role": "user", "content": PROMPTS[name]}], "max_tokens": 160,
            "temperature": temperature, "seed": seed, "spec_k": spec_k,
            "response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name], "strict": True}}},
            timeout=600)
        if status == 400 and "XGrammar" in json.dumps(body):
            if CI:
                self.fail("CI=true and this tessera serve has no structured output: " + json.dumps(body))
            self.skipTest("no structured output in this build")
        self.assertEqual(status, 200, body)
        return body["choices"][0]

    def test_greedy_equals_no_speculation_and_sampled_replies_validate(self):
        before = self.server.metrics()
        for name in sorted(SCHEMAS):
            plain, spec = self.reply(name, 0), self.reply(name, 4)
            self.assertEqual(spec["message"]["content"], plain["message"]["content"], name)
            self.assertEqual(spec["finish_reason"], plain["finish_reason"], name)
            jsonschema.validate(json.loads(spec["message"]["content"]), SCHEMAS[name])
            for seed in (11, 12):
                c = self.reply(name, 4, temperature=0.8, seed=seed)
                self.assertEqual(c["finish_reason"], "stop", c)
                jsonschema.validate(json.loads(c["message"]["content"]), SCHEMAS[name])
        after = self.server.metrics()
        drafted = after["tessera_spec_draft_tokens_total"] - before.get("tessera_spec_draft_tokens_total", 0)
        accepted = after["tessera_spec_accepted_tokens_total"] - before.get("tessera_spec_accepted_tokens_total", 0)
        print(f"structured + ngram: {int(drafted)} draft tokens, {int(accepted)} accepted")
        self.assertGreater(drafted, 0, "no request under a grammar drafted")
        self.assertGreater(accepted, 0)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)

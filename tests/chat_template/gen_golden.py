#!/usr/bin/env python3
"""Generates tests/data/chat_template_golden.txt: each template in tests/data/chat_templates/
plus SmolLM2's own (from the GGUF key tokenizer.chat_template) rendered with the Jinja
environment transformers' apply_chat_template builds (trim_blocks, lstrip_blocks, loop
controls, its tojson and raise_exception), for each conversation below, with and without
add_generation_prompt.

Format (hex-encoded UTF-8, read by tests/chat_template/chat_template_test.cpp):
  M <conversation>:<role> <hex content> :          one message, in order
  R <template>:<conversation>:<0|1> <hex output> :  rendered text
  X <template>:<conversation>:<0|1> <hex error> :   raise_exception's message
Run: python3 tests/chat_template/gen_golden.py models-cache/SmolLM2-135M-Instruct.Q4_1.gguf
The templates are the models' own: qwen35.jinja is Qwen3.5-4B's chat_template (as llama.cpp keeps
it in models/templates/Qwen3.5-4B.jinja), qwen25.jinja Qwen2.5-Instruct's, gpt-oss.jinja
gpt-oss's harmony template (models/templates/openai-gpt-oss-120b.jinja there), and so on.
strftime_now renders SOURCE_DATE_EPOCH's day (the test sets the same value; gpt-oss prints the date).
"""
import os
import sys

import gguf
from jinja2.exceptions import TemplateError
from transformers.utils.chat_template_utils import _compile_jinja_template

CONVERSATIONS = [
    [("system", "  You are a terse assistant.\n"), ("user", "What is 2+2?"),
     ("assistant", " It is 4. "), ("user", "And in French, s'il vous plaît? 🤔")],
    [("user", "Hi there"), ("assistant", "Hello! How can I help?"), ("user", "Tell me a joke")],
    [("system", "Use tools."), ("user", "Weather in Paris?"), ("assistant", "Let me check."),
     ("tool", "{\"temp\": 21}"), ("tool", "{\"sky\": \"clear\"}"), ("user", "Thanks — 日本語 too?")],
]
EXTRA = {"bos_token": "<s>", "eos_token": "</s>"}
SOURCE_DATE_EPOCH = 1767225600  # 2026-01-01 00:00:00 UTC; tests/chat_template/CMakeLists.txt sets the same


def strftime_now(fmt):
    import datetime
    return datetime.datetime.fromtimestamp(SOURCE_DATE_EPOCH, datetime.timezone.utc).strftime(fmt)


def main():
    here = os.path.join(os.path.dirname(__file__), "..", "data", "chat_templates")
    templates = {}
    for name in sorted(os.listdir(here)):
        with open(os.path.join(here, name), encoding="utf-8") as f:
            templates[name.rsplit(".", 1)[0]] = f.read()
    reader = gguf.GGUFReader(sys.argv[1])
    field = reader.fields["tokenizer.chat_template"]
    templates["smollm2"] = bytes(field.parts[field.data[0]]).decode("utf-8")
    out = []
    for ci, conv in enumerate(CONVERSATIONS):
        for role, content in conv:
            out.append(f"M {ci}:{role} {content.encode().hex()} :")
    for name, source in templates.items():
        tmpl = _compile_jinja_template(source)
        tmpl.globals["strftime_now"] = strftime_now
        for ci, conv in enumerate(CONVERSATIONS):
            messages = [{"role": r, "content": c} for r, c in conv]
            for agp in (0, 1):
                key = f"{name}:{ci}:{agp}"
                try:
                    text = tmpl.render(messages=messages, add_generation_prompt=bool(agp), **EXTRA)
                    out.append(f"R {key} {text.encode().hex()} :")
                except TemplateError as e:
                    out.append(f"X {key} {str(e).encode().hex()} :")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()

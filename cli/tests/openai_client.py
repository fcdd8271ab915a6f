"""Drives `vkml serve` with OpenAI's Python client (cli/tests/serve.rs runs it).

Usage: openai_client.py BASE_URL MODEL. Prints one line per check; exits non-zero on
the first failure.
"""
import json
import sys
import time
import urllib.error
import urllib.request

import openai

base, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=120)
question = [{"role": "user", "content": "What is the capital of France?"}]

# Non-streamed chat completion, greedy.
r = client.chat.completions.create(model=model, messages=question, temperature=0, max_tokens=12)
text = r.choices[0].message.content
assert r.object == "chat.completion" and r.model == model, r
assert r.choices[0].finish_reason in ("stop", "length"), r
assert r.usage.prompt_tokens > 0 and 0 < r.usage.completion_tokens <= 12, r.usage
# (Which words: the model's business; the CPU backend's 8-bit activations flip this
# prompt's first-token near-tie, "The" against "L".)
assert text.strip(), text
print("chat:", repr(text), r.usage.completion_tokens, "tokens")

# Streamed: the same greedy text, piece by piece, ending with a finish reason.
stream = client.chat.completions.create(model=model, messages=question, temperature=0, max_tokens=12, stream=True)
pieces, finish = [], None
for chunk in stream:
    assert chunk.object == "chat.completion.chunk", chunk
    delta = chunk.choices[0].delta
    if delta.content:
        pieces.append(delta.content)
    finish = chunk.choices[0].finish_reason or finish
assert "".join(pieces) == text and finish == r.choices[0].finish_reason, (pieces, finish)
print("stream:", len(pieces), "pieces, finish", finish)

# Completions: greedy, then with a stop text taken from the middle of that reply, which
# ends the reply just before it.
prompt = "The capital of France is"
full = client.completions.create(model=model, prompt=prompt, temperature=0, max_tokens=12).choices[0]
assert full.finish_reason in ("stop", "length") and len(full.text) >= 4, full
stop = full.text[len(full.text) // 2:][:3]
c = client.completions.create(model=model, prompt=prompt, temperature=0, max_tokens=12, stop=[stop]).choices[0]
assert c.text == full.text[:full.text.index(stop)] and c.finish_reason == "stop", (full, stop, c)
print("completion:", repr(full.text), "stopped at", repr(stop), "->", repr(c.text))

# Bad requests: a field of the wrong type, an unknown model, a prompt past the context.
try:
    client.chat.completions.create(model=model, messages=question, temperature="hot")
    raise SystemExit("a string temperature was accepted")
except openai.BadRequestError as e:
    assert e.status_code == 400 and e.body["param"] == "temperature", e.body
    print("wrong type:", e.status_code, e.body["message"])
try:
    client.chat.completions.create(model="no-such-model", messages=question)
    raise SystemExit("an unknown model was accepted")
except openai.NotFoundError as e:
    assert e.body["code"] == "model_not_found", e.body
    print("unknown model:", e.status_code)
try:
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": "word " * 800}])
    raise SystemExit("a prompt past the context was accepted")
except openai.BadRequestError as e:
    assert e.body["code"] == "context_length_exceeded", e.body
    print("too long:", e.status_code, e.body["message"])
try:
    client.chat.completions.create(model=model, messages=question, stop=["x" * 300])
    raise SystemExit("a 300-byte stop text was accepted")
except openai.BadRequestError as e:
    assert "a stop text of 300 bytes" in e.body["message"], e.body
    print("long stop:", e.status_code)
try:
    urllib.request.urlopen(base + "/v1/chat/completions", data=b'{"model": ', timeout=30)
    raise SystemExit("malformed JSON was accepted")
except urllib.error.HTTPError as e:
    body = json.loads(e.read())
    assert e.code == 400 and "not valid JSON" in body["error"]["message"], body
    print("malformed JSON:", e.code)

# A stream dropped after a few pieces stops its generation: the next request is served
# at once, not after the thousands of tokens the dropped one asked for.
long = client.chat.completions.create(
    model=model, messages=[{"role": "user", "content": "Count from 1 to 10000."}], temperature=0,
    max_tokens=3000, stream=True)
for i, _ in enumerate(long):
    if i == 3:
        break
long.close()
t = time.time()
r = client.chat.completions.create(model=model, messages=question, temperature=0, max_tokens=4)
took = time.time() - t
assert took < 20, f"the request after a dropped stream took {took:.1f} s"
print(f"after a dropped stream: served in {took:.1f} s")

#!/usr/bin/env python3
"""Writes the hand-made seeds of every fuzz target into fuzz/corpus/<target>/
(and the inputs of panics known and fixed elsewhere into fuzz/known/<target>/).
Run from the repository root; idempotent. Fuzzing adds its own finds beside
these (then `cargo fuzz cmin` keeps the corpus small)."""
import gzip, io, json, os, struct, tarfile

ROOT = os.path.join(os.path.dirname(__file__), "..")

def put(kind, target, name, data):
    d = os.path.join(ROOT, kind, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)

def seed(target, name, data):
    put("corpus", target, name, data)

def known(target, name, data):
    put("known", target, name, data)

N = b"\0"

# ---------------------------------------------------------------- config
small = """version: 2
models:
  tiers:
    default: anthropic/claude-sonnet-4-5
    fast: [openai/gpt-4o-mini, local/qwen3]
providers:
  local:
    kind: openai
    base_url: http://localhost:11434/v1
    api_key: ${KEY:-none}
gateway:
  bind: 127.0.0.1:7070
  allowed_origins: ["https://flynn.example"]
channels:
  telegram:
    token: ${A}
"""
seed("config_parse", "small", small)
seed("config_parse", "bad-indent", "models:\n  tiers:\n default: x\n")
seed("config_parse", "unknown-key", "modles:\n  tiers: {}\n")
seed("config_parse", "anchors", "a: &x {b: 1}\nc: *x\nd: !!str 5\n")
seed("config_parse", "unset-var", "providers:\n  x:\n    kind: openai\n    api_key: ${UNSET}\n")
seed("config_parse", "duplicate", "gateway:\n  bind: a\ngateway:\n  bind: b\n")
seed("config_parse", "huge-number", "gateway:\n  shutdown_grace_secs: 18446744073709551615\n")
seed("config_edit", "set-tier", b"models.tiers.default" + N + b'"openai/gpt-4o"' + N + small.encode())
seed("config_edit", "add-block", b"gateway.port" + N + b"7071" + N + b"models:\n  tiers:\n    default: x\n")
seed("config_edit", "list", b"models.tiers.fast" + N + b'["a","b"]' + N + small.encode())
seed("config_edit", "comments", b"a.b.c" + N + b"true" + N + b"# top\na:\n  # inner\n  b:\n    c: false # trailing\n  d: 1\n")
known("config_edit", "p4-multibyte", b"agent.model" + N + b'"x"' + N + "agent:\n  title: café\nother: 1\n".encode())
known("config_edit", "p4-multibyte-2", b"agent.title2" + N + b'"x"' + N + "agent:\n  title: café".encode())
seed("config_migrate", "rename", b"models.tiers.default" + N + b"primary" + N + small.encode())
seed("config_migrate", "rename-block", b"gateway" + N + b"server" + N + small.encode())
seed("config_migrate", "missing", b"nothing.here" + N + b"there" + N + small.encode())
known("config_migrate", "p4-multibyte", b"agent.title" + N + b"name" + N + "agent:\n  title: café\nx: é".encode())
for name, text in [("plain", "hello"), ("var", "${A}"), ("default", "${UNSET:-fallback}"),
                   ("escape", "$${A} and $ alone"), ("unclosed", "${A"), ("bad-name", "${1A}"),
                   ("question", "${A:?x}"), ("nested", "${A:-${B}}"), ("multi", "é${A}😀${EMPTY:-z}")]:
    seed("config_expand", name, text)

# ---------------------------------------------------------------- models
def sse_events(events):
    return "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" if e else f"data: {d if isinstance(d, str) else json.dumps(d)}\n\n" for e, d in events)

openai = sse_events([
    (None, {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]}),
    (None, {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {"content": "lo é😀"}}]}),
    (None, {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "shell", "arguments": "{\"cmd\":"}}]}}]}),
    (None, {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"ls\"}"}}]}}]}),
    (None, {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 10, "completion_tokens": 5}}),
    (None, "[DONE]"),
])
anthropic = sse_events([
    ("message_start", {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [], "usage": {"input_tokens": 10, "output_tokens": 1}}}),
    ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi é😀"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "shell", "input": {}}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"cmd\": \"ls\"}"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 1}),
    ("ping", {"type": "ping"}),
    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 7}}),
    ("message_stop", {"type": "message_stop"}),
])
anthropic_error = sse_events([("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})])
seed("sse", "openai", b"\x06" + openai.encode())
seed("sse", "anthropic", b"\x07" + anthropic.encode())
seed("sse", "anthropic-error", b"\x01" + anthropic_error.encode())
seed("sse", "crlf", b"\x04" + openai.replace("\n", "\r\n").encode())
seed("sse", "comments", b"\x02: keep-alive\n\nretry: 10\nid: 1\n" + openai.encode())
def wire_lines(text):
    out = []
    for block in text.strip().split("\n\n"):
        name, data = "", ""
        for line in block.split("\n"):
            if line.startswith("event: "): name = line[7:]
            if line.startswith("data: "): data = line[6:]
        out.append(f"{name}\t{data}")
    return "\n".join(out)
seed("wire_events", "openai", b"\x00" + wire_lines(openai).encode())
seed("wire_events", "anthropic", b"\x01" + wire_lines(anthropic).encode())
seed("wire_events", "anthropic-error", b"\x01" + wire_lines(anthropic_error).encode())
seed("wire_events", "openai-error", b"\x00\t" + json.dumps({"error": {"message": "context_length_exceeded", "type": "invalid_request_error", "code": "context_length_exceeded"}}).encode())
for name, body in [("openai", {"error": {"message": "Rate limit", "type": "requests", "code": "rate_limit_exceeded"}}),
                   ("anthropic", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
                   ("gemini-array", [{"error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}}]),
                   ("message-only", {"message": "bad"}), ("empty-array", [])]:
    seed("vendor_error", name, json.dumps(body))
seed("vendor_error", "html", "<html><body>502 Bad Gateway</body></html>")
seed("vendor_error", "long", "é" * 3000)
for name, value in [("seconds", b"30"), ("fraction", b"1.5"), ("date", b"Wed, 21 Oct 2015 07:28:00 GMT"),
                    ("negative", b"-1"), ("nan", b"NaN"), ("inf", b"inf")]:
    seed("retry_hints", name, value + N + b'{"message": "You are being rate limited.", "retry_after": 0.5, "global": false}' + N + b"\x01\xad")
seed("retry_hints", "discord-403", b"" + N + b'{"message": "Missing Access", "code": 50001}' + N + b"\x01\x93")
for name, value, body in [("p1-huge-int", b"99999999999999999999", b""), ("p1-1e20", b"1e20", b""),
                          ("p1-ms-1e300", b"1e300", b""), ("p2-slack-1e20", b"1e20", b""),
                          ("p3-discord-body-1e30", b"1", b'{"retry_after": 1e30}'), ("p3-discord-header-1e30", b"1e30", b"{}")]:
    known("retry_hints", name, value + N + body + N + b"\x01\xad")

# ---------------------------------------------------------------- channels
user = {"id": 7, "is_bot": False, "first_name": "Ann", "username": "ann"}
tg_msg = {"message_id": 1, "date": 1700000000, "chat": {"id": -100, "type": "supergroup", "title": "G"}, "from": user,
          "text": "@flynn_bot, what's up é😀", "entities": [{"type": "mention", "offset": 0, "length": 10}]}
seed("telegram", "mention", b"\x00" + json.dumps(tg_msg).encode())
tg_cmd = dict(tg_msg, text="/reset@flynn_bot now", entities=[{"type": "bot_command", "offset": 0, "length": 16}])
seed("telegram", "command", b"\x00" + json.dumps(tg_cmd).encode())
tg_dm = {"message_id": 2, "date": 1700000000, "chat": {"id": 7, "type": "private", "first_name": "Ann"}, "from": user,
         "caption": "look", "photo": [{"file_id": "f1", "file_unique_id": "u1", "width": 1, "height": 1}],
         "reply_to_message": {"message_id": 1, "date": 1, "chat": {"id": 7, "type": "private"}, "from": {"id": 42, "is_bot": True, "first_name": "F"}}}
seed("telegram", "photo-reply", b"\x00" + json.dumps(tg_dm).encode())
seed("telegram", "callback", b"\x01" + json.dumps({"id": "cb1", "from": user, "chat_instance": "ci", "data": "approve:1",
     "message": {"message_id": 3, "date": 1, "chat": {"id": 7, "type": "private"}}}).encode())
seed("telegram", "entities", b"\x02" + b"\x00\x00\x00\x0a\x00" + b"\x02\x0b\x00\x06\x00" + N + "@flynn_bot /start@flynn_bot 😀é".encode())
seed("telegram", "entities-past-end", b"\x02" + b"\x00\xff\xff\xff\xff" + b"\x00\x01\x00\x01\x00" + N + "😀".encode())

slack_event = {"type": "message", "channel": "C1", "user": "U1", "ts": "1700000000.000100", "text": "<@U0BOT|flynn> hi &amp; &lt;b&gt;",
               "files": [{"id": "F1", "name": "a.png", "mimetype": "image/png", "size": 3, "url_private_download": "https://files.slack.com/a"}]}
seed("slack", "message", b"\x00" + json.dumps(slack_event).encode())
seed("slack", "mention", b"\x00" + json.dumps({"type": "app_mention", "channel": "D1", "user": "U1", "ts": "1.2", "text": "<@U0BOT> hey", "thread_ts": "1.1"}).encode())
seed("slack", "subtype", b"\x00" + json.dumps({"type": "message", "subtype": "file_share", "channel": "C1", "user": "U1", "ts": "1.2", "text": ""}).encode())
seed("slack", "block-actions", b"\x01" + json.dumps({"type": "block_actions", "user": {"id": "U1", "name": "ann"}, "channel": {"id": "C1"},
     "container": {"message_ts": "1.2"}, "trigger_id": "t", "actions": [{"action_id": "a", "value": "approve:1"}], "response_url": "https://hooks.slack.com/x"}).encode())
seed("slack", "command", b"\x02command=%2Fflynn&text=reset+now&user_id=U1&user_name=ann&channel_id=C1&trigger_id=t&team_id=T1")
seed("slack", "without-mention", b"\x03<@U0BOT|flynn> a <@U0BOT> b &lt;&amp;&gt; <@U0BO")
seed("slack", "verify", b"\x041700000000" + N + b"v0=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + N + b'{"type":"url_verification"}')
seed("slack", "verify-old", b"\x041600000000" + N + b"v0=00" + N + b"{}")
known("slack", "p7-i64-min", b"\x04-9223372036854775808" + N + b"v0=00" + N + b"{}")

dc_user = {"id": "7", "username": "ann", "discriminator": "0", "avatar": None, "global_name": "Ann"}
dc_msg = {"id": "100", "channel_id": "200", "guild_id": "300", "author": dc_user, "content": "<@42> hi <@!42> there",
          "timestamp": "2026-11-26T00:00:00+00:00", "edited_timestamp": None, "tts": False, "mention_everyone": False,
          "mentions": [{"id": "42", "username": "flynn", "discriminator": "0001", "avatar": None}], "mention_roles": [], "attachments": [
              {"id": "1", "filename": "a.txt", "size": 3, "url": "https://cdn.discordapp.com/a.txt", "proxy_url": "https://media/a", "content_type": "text/plain"}],
          "embeds": [], "pinned": False, "type": 0, "flags": 0}
seed("discord", "message", b"\x00" + json.dumps(dc_msg).encode())
seed("discord", "dm", b"\x00" + json.dumps(dict(dc_msg, guild_id=None, content="hello")).encode())
seed("discord", "interaction-command", b"\x01" + json.dumps({"id": "500", "application_id": "43", "type": 2, "token": "tok", "version": 1,
     "channel_id": "200", "user": dc_user, "data": {"id": "9", "name": "flynn", "type": 1, "options": [{"name": "text", "type": 3, "value": "reset"}]}}).encode())
seed("discord", "interaction-button", b"\x01" + json.dumps({"id": "501", "application_id": "43", "type": 3, "token": "tok", "version": 1,
     "channel_id": "200", "guild_id": "300", "member": {"user": dc_user, "roles": [], "joined_at": "2026-01-01T00:00:00+00:00", "deaf": False, "mute": False, "flags": 0},
     "message": dc_msg, "data": {"custom_id": "approve:1", "component_type": 2}}).encode())
seed("discord", "strip", b"\x02<@42><@!42> <@42 <@!4242> x")

wa = {"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [{"field": "messages", "value": {
    "messaging_product": "whatsapp", "metadata": {"display_phone_number": "15550001", "phone_number_id": "1234567890"},
    "contacts": [{"profile": {"name": "Ann"}, "wa_id": "4912"}],
    "messages": [{"from": "4912", "id": "wamid.A", "timestamp": "1700000000", "type": "text", "text": {"body": "hi é"}},
                 {"from": "4912", "id": "wamid.B", "timestamp": "1700000001", "type": "image", "image": {"id": "m1", "mime_type": "image/jpeg", "caption": "c"}},
                 {"from": "4912", "id": "wamid.C", "timestamp": "1700000002", "type": "interactive", "interactive": {"type": "button_reply", "button_reply": {"id": "approve:1", "title": "Yes"}}, "context": {"id": "wamid.X"}}],
    "statuses": [{"id": "wamid.Y", "status": "delivered", "timestamp": "1700000003", "recipient_id": "4912"}]}}]}]}
seed("whatsapp", "notification", b"\x00" + json.dumps(wa).encode())
seed("whatsapp", "not-ours", b"\x00" + json.dumps({"object": "page", "entry": []}).encode())
seed("whatsapp", "signature", b"\x01sha256=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + N + b"{}")
seed("whatsapp", "handshake", b"\x02hub.mode=subscribe&hub.verify_token=verify&hub.challenge=123")
known_wa = json.loads(json.dumps(wa))
known_wa["entry"][0]["changes"][0]["value"]["messages"][0]["timestamp"] = "18446744073709551615"
known("whatsapp", "p6-u64-max", b"\x00" + json.dumps(known_wa).encode())

md = "# Plan\nUse **bold**, *italic*, ~~old~~ and `a<b>&c`.\n- see [docs](https://example.com/a?b=1&c=2)\n```rust\nif a < b && c > d {}\n```\n> quote\n\n| a | b |\n|---|---|\n| 1 | 2 |\n@everyone <@123> <@&9>\n"
seed("format", "sample", b"\x00\x00" + md.encode())
seed("format", "long-code", b"\x10\x01" + ("```python\n" + "print('x')\n" * 60 + "```\n").encode())
seed("format", "escapes", b"\x20\x00" + ("<&>\"" * 200).encode())
seed("format", "emoji", b"\x05\x01" + ("😀é " * 120).encode())
seed("format", "unclosed", b"\x00\x02" + "**a _b ~~c `d [e](f ```x\n".encode())
seed("format", "fences", b"\x00\x00" + "```\n```\n````\n``` ```\n`````lang\ncode\n".encode() * 5)

# ---------------------------------------------------------------- rest
page = "<html><head><title>T</title><meta charset='utf-8'></head><body><nav>menu</nav><article><h1>Title</h1><p>Para <b>bold</b> <a href='/x'>link</a></p><ul><li>a</li></ul><pre><code>x</code></pre><table><tr><td>1</td></tr></table></article><script>x()</script></body></html>"
seed("web", "article", b"\x00" + page.encode())
seed("web", "text", b"\x04" + page.encode())
seed("web", "latin1", b"\x05" + "<p>caf\xe9</p>".encode("latin-1"))
seed("web", "meta-charset", b"\x01<meta charset=\"shift_jis\"><p>\x82\xa0</p>")
seed("web", "cut-utf8", b"\x81" + "é😀".encode()[:-1])
seed("web", "ddg", b"\x02<div class='result'><a class='result__a' href='//duckduckgo.com/l/?uddg=https%3A%2F%2Fexample.com%2F&rut=x'>Ex</a><a class='result__snippet'>snip <b>b</b></a></div>")
seed("web", "plain", b"\x03a <b>b</b> &amp; &lt;c&gt; &#39; &#x1F600;")
seed("web", "nested", b"\x00" + b"<blockquote>" * 300)
known("web", "p5-nested-blockquote", b"\x00" + b"<blockquote>" * 100000)

seed("gateway", "bearer", b"Bearer tok-123" + N + b"token=a%20b+c%zz%4" + N + b"https://flynn.example/" + N + b"flynn.example" + N + b'{"session":"web:1","text":"hi"}')
seed("gateway", "query-token", b"" + N + b"x=1&token=%F0%9F%98%80" + N + b"http://localhost:7070" + N + b"localhost:7070" + N + b'[{"session":"web:1"}]')
seed("gateway", "ipv6", b"Basic x" + N + b"token=" + N + b"http://[::1]:7070" + N + b"[::1]:7070" + N + b"null")

for name, text in [("ok", "telegram:12345"), ("thread", "slack:C1:1700000000.1"), ("dots", "..:../../etc"),
                   ("long", "a:" + "b" * 300), ("space", "a: b"), ("ns", "projects/flynn"), ("dotdot", "projects/../x"),
                   ("session", "session"), ("daily", "daily.md"), ("unicode", "é:😀")]:
    seed("session_keys", name, text)

manifest = {"name": "weather", "description": "Forecasts", "version": "1.0.0", "requires": {"bins": ["curl"], "env": ["KEY"], "os": ["linux"]},
            "permissions": {"network": ["api.weather.example"], "files": ["~/weather"]}, "install": [{"kind": "brew", "formula": "curl"}]}
seed("skill_manifest", "full", json.dumps(manifest))
seed("skill_manifest", "minimal", json.dumps({"name": "x", "description": "y"}))
seed("skill_manifest", "bad-name", json.dumps({"name": "../x", "description": "y"}))
seed("skill_manifest", "wrong-type", '{"name": 5}')

def tar_bytes(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, kind, data in entries:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                t.addfile(info)
            elif kind == "sym":
                info.type = tarfile.SYMTYPE; info.linkname = data
                t.addfile(info)
            elif kind == "hard":
                info.type = tarfile.LNKTYPE; info.linkname = data
                t.addfile(info)
            else:
                info.size = len(data); info.mode = 0o755 if name.endswith(".sh") else 0o644
                t.addfile(info, io.BytesIO(data))
    return buf.getvalue()
good = tar_bytes([("weather/", "dir", b""), ("weather/SKILL.md", "file", b"# Weather\n"), ("weather/manifest.json", "file", json.dumps(manifest).encode()), ("weather/run.sh", "file", b"#!/bin/sh\n")])
seed("skill_archive", "good-gz", b"\x00" + gzip.compress(good))
seed("skill_archive", "good-tar", b"\x01" + good)
seed("skill_archive", "dotdot", b"\x01" + tar_bytes([("../evil", "file", b"x")]))
seed("skill_archive", "absolute", b"\x01" + tar_bytes([("/tmp/evil", "file", b"x")]))
seed("skill_archive", "symlink", b"\x01" + tar_bytes([("link", "sym", "/etc/passwd")]))
seed("skill_archive", "hardlink", b"\x01" + tar_bytes([("a", "file", b"x"), ("b", "hard", "../../x")]))
seed("skill_archive", "dot-parts", b"\x01" + tar_bytes([("./a/./b", "file", b"x"), ("a/", "dir", b"")]))

t = struct.pack("<I", 3600)
for name, tz, expr in [("every-5", "UTC", "*/5 * * * *"), ("berlin", "Europe/Berlin", "30 2 * * *"), ("dst", "America/New_York", "30 2 * 3 SUN#2"),
                       ("last", "UTC", "0 0 L * *"), ("weekday", "Asia/Tokyo", "0 9 15W * *"), ("seconds", "UTC", "*/10 * * * * *"),
                       ("feb30", "UTC", "0 0 30 2 *"), ("bad", "Mars/Olympus", "61 * * * *")]:
    seed("cron", name, t + tz.encode() + N + expr.encode() + N + b"- [ ] every day at 09:00: stand-up\n- every 2h: check mail\n- bad line\n")

seed("memory_chunk", "notes", "# Notes\n\nSome text.\n\n## Sub\n- a\n- b\n\n```\ncode\n# not a heading\n```\n" + "line\n" * 200)
seed("memory_chunk", "long-line", "x" * 5000)
seed("memory_chunk", "crlf", "# A\r\nb\r\n\r\n# C\r\n")
seed("memory_chunk", "empty", "")

# history: head byte = role (bit 0) + block count ((>>1)%5); block byte = kind (%8) + id ((>>3)%4)
seed("history", "paired", bytes([0x02, 0x00, 0x05, 0x02, 0x00, 0x02, 0x04, 0x03, 0x00]))
seed("history", "interrupted", bytes([0x02, 0x00, 0x05, 0x02, 0x0a, 0x02, 0x00]))
seed("history", "orphan-result", bytes([0x02, 0x04, 0x03, 0x00]))
seed("history", "duplicate-ids", bytes([0x05, 0x02, 0x02, 0x04, 0x04, 0x05, 0x02]))
seed("history", "same-role-runs", bytes([0x02, 0x00, 0x02, 0x07, 0x03, 0x02, 0x03, 0x06, 0x00, 0x00]))

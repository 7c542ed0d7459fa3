# SESSIONS clients, each sending MESSAGES turns one after another through
# /v1/chat/completions, to a random node (spread) or one node (sticky).
import asyncio, json, random, sys, time
ports = [int(p) for p in sys.argv[1].split(",")]
SESSIONS = int(sys.argv[2]); MESSAGES = int(sys.argv[3]); MODE = sys.argv[4]; TOKEN = sys.argv[5]
latencies = []; failures = 0
async def request(port, session, text):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"model": "default", "messages": [{"role": "user", "content": text}]}).encode()
    writer.write((f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nauthorization: Bearer {TOKEN}\r\n"
                  f"content-type: application/json\r\nx-flynn-session: {session}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body)
    await writer.drain()
    data = await reader.read()
    writer.close()
    return data.split(b" ", 2)[1] == b"200", data
async def client(i):
    global failures
    session = f"bench:s{i}"
    sticky = ports[i % len(ports)]
    for m in range(MESSAGES):
        port = sticky if MODE == "sticky" else random.choice(ports)
        start = time.monotonic()
        ok, data = await request(port, session, f"message {m}")
        if not ok:
            failures += 1
            if failures < 5: print(data[:300], file=sys.stderr)
        latencies.append(time.monotonic() - start)
async def main():
    start = time.monotonic()
    await asyncio.gather(*(client(i) for i in range(SESSIONS)))
    took = time.monotonic() - start
    latencies.sort()
    n = len(latencies)
    print(json.dumps({"turns": n, "failures": failures, "seconds": round(took, 2), "turns_per_s": round(n / took, 1),
                      "p50": round(latencies[n // 2], 3), "p99": round(latencies[int(n * 0.99)], 3)}))
asyncio.run(main())

"""The floor for bench/engine.py: a bare ASGI app, no Django, served by the same
daphne as Steerboard (``python -m daphne -b 127.0.0.1 -p PORT bare_app:app``,
run from bench/). Every HTTP request has its body read and is answered 200
``{"ok": true}``; every websocket is accepted and each text frame echoed."""

BODY = b'{"ok": true}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


async def app(scope, receive, send):
    if scope["type"] == "http":
        more = True
        while more:
            event = await receive()
            if event["type"] == "http.disconnect":
                return
            more = event.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        await send({"type": "http.response.body", "body": BODY})
    elif scope["type"] == "websocket":
        while True:
            event = await receive()
            kind = event["type"]
            if kind == "websocket.connect":
                await send({"type": "websocket.accept"})
            elif kind == "websocket.receive":
                if event.get("text") is not None:
                    await send({"type": "websocket.send", "text": event["text"]})
                else:
                    await send({"type": "websocket.send", "bytes": event.get("bytes") or b""})
            elif kind == "websocket.disconnect":
                return
    elif scope["type"] == "lifespan":
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

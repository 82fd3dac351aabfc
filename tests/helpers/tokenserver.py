#!/usr/bin/env python3
"""tokenserver — the token service of a registry's Bearer authentication, for tests.

  tokenserver.py --key KEY --cert CERT --issuer ISSUER --user USER:PASS --log FILE [--anonymous]

Listens on 127.0.0.1 (a free port), prints the port as one line on stdout once it accepts,
and answers GET /token?service=S&scope=SCOPE (the distribution token protocol):

  - with Basic credentials equal to USER:PASS: a token granting pull and push on the
    repositories the scopes name;
  - without credentials: 401, unless --anonymous (then a token granting pull only);
  - with other credentials: 401.

A token is a JWT signed RS256 with KEY (by `openssl dgst -sha256 -sign`: no Python crypto
module is needed) whose header carries CERT in `x5c`, so that docker-registry configured with
`auth: token: {realm, service: S, issuer: ISSUER, rootcertbundle: CERT}` accepts it; its
audience is the service asked for.  Each request is appended to FILE as one JSON line
(path, whether an Authorization header came, the user, the scopes, the answer's status).
"""
import argparse
import base64
import http.server
import json
import os
import subprocess
import sys
import time
import urllib.parse


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--key", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--issuer", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--anonymous", action="store_true")
    args = ap.parse_args()

    pem = open(args.cert).read()
    der_b64 = "".join(l for l in pem.splitlines() if l and not l.startswith("-----"))
    want = "Basic " + base64.b64encode(args.user.encode()).decode()
    user = args.user.split(":", 1)[0]

    def sign(data):
        return subprocess.run(["openssl", "dgst", "-sha256", "-sign", args.key],
                              input=data, capture_output=True, check=True).stdout

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def answer(self, status, body, note):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 401:
                self.send_header("WWW-Authenticate", 'Basic realm="lazyroot-tests"')
            self.end_headers()
            self.wfile.write(data)
            note["status"] = status
            with open(args.log, "a") as f:
                f.write(json.dumps(note) + "\n")

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            q = urllib.parse.parse_qs(url.query)
            got = self.headers.get("Authorization")
            scopes = " ".join(q.get("scope", [])).split()
            note = {"path": url.path, "authorization": got is not None, "scopes": scopes,
                    "service": q.get("service", [""])[0]}
            if url.path != "/token":
                return self.answer(404, {"error": "not found"}, note)
            if got == want:
                actions, note["user"] = ["pull", "push"], user
            elif got is None and args.anonymous:
                actions, note["user"] = ["pull"], ""
            else:
                return self.answer(401, {"error": "unauthorized"}, note)
            access = []
            for s in scopes:
                parts = s.split(":")
                if len(parts) >= 3 and parts[0] == "repository":
                    asked = parts[-1].split(",")
                    access.append({"type": "repository", "name": ":".join(parts[1:-1]),
                                   "actions": [a for a in asked if a in actions]})
            now = int(time.time())
            header = {"typ": "JWT", "alg": "RS256", "x5c": [der_b64]}
            claims = {"iss": args.issuer, "sub": note["user"], "aud": note["service"],
                      "exp": now + 300, "nbf": now - 10, "iat": now,
                      "jti": b64url(os.urandom(12)), "access": access}
            signing_input = (b64url(json.dumps(header).encode()) + "." +
                             b64url(json.dumps(claims).encode()))
            token = signing_input + "." + b64url(sign(signing_input.encode()))
            self.answer(200, {"token": token, "access_token": token, "expires_in": 300,
                              "issued_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))},
                        note)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())

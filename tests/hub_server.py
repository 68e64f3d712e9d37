#!/usr/bin/python3
"""A Hugging Face hub on loopback for the download tests: serves ROOT/<owner>/<repo>/<file> at
/<owner>/<repo>/resolve/main/<file> as the hub does (HEAD on a large file answers 302 to a content
server with X-Linked-Size and X-Linked-Etag, the file's SHA-256; GET follows to /cdn/..., which
honours Range). Writes its port to PORT_FILE and logs every request (method, path, Range) to LOG.

usage: hub_server.py ROOT PORT_FILE LOG [--missing FILE] [--wrong-sha FILE] [--cut FILE:BYTES]
                     [--ignore-range] [--announce FILE:BYTES] [--endless FILE] [--html FILE]
                     [--trickle FILE] [--no-size FILE]
  --missing FILE     404 for that file name in every repository
  --wrong-sha FILE   report a SHA-256 that is not the file's
  --cut FILE:BYTES   GET sends the full Content-Length but closes after BYTES (from the range start)
  --ignore-range     answer a ranged GET with the whole file (200), as some servers do
  --announce F:N     X-Linked-Size says N, whatever the file's size
  --endless FILE     GET sends bytes without end (no Content-Length)
  --html FILE        GET and HEAD answer with a captive portal's page (text/html), 200
  --trickle FILE     GET sends its status line and headers at 2 bytes a second
  --no-size FILE     HEAD says no size (no X-Linked-Size, no Content-Length), as a plain mirror
"""
import hashlib
import http.server
import os
import sys
import time

ARGS = sys.argv[1:]
ROOT, PORT_FILE, LOG = ARGS[:3]
OPTS = {}
i = 3
while i < len(ARGS):
    OPTS.setdefault(ARGS[i], []).append(ARGS[i + 1] if ARGS[i] != "--ignore-range" else True)
    i += 1 if ARGS[i] == "--ignore-range" else 2
LFS_MIN = 4096  # files at least this large are "LFS" files, with metadata


class Hub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def record(self):
        with open(LOG, "a") as f:
            f.write("%s %s %s\n" % (self.command, self.path, self.headers.get("Range", "-")))

    def target(self):
        """(path on disk, file name) of a /owner/repo/resolve/main/file or /cdn/owner/repo/file URL"""
        parts = self.path.split("/")
        if len(parts) == 6 and parts[3:5] == ["resolve", "main"]:
            rel = parts[1:3] + [parts[5]]
        elif len(parts) == 5 and parts[1] == "cdn":
            rel = parts[2:5]
        else:
            return None, None
        if parts[-1] in OPTS.get("--missing", []):
            return None, None
        path = os.path.join(ROOT, *rel)
        return (path, parts[-1]) if os.path.isfile(path) else (None, None)

    def fail(self, code):
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def lfs_redirect(self, path, name):
        """a large file's resolve URL answers 302 to the content server, with its metadata; False otherwise"""
        if "/resolve/" not in self.path or os.path.getsize(path) < LFS_MIN:
            return False
        if name in OPTS.get("--no-size", []):
            return False
        sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
        if name in OPTS.get("--wrong-sha", []):
            sha = hashlib.sha256(b"not the file").hexdigest()
        size = os.path.getsize(path)
        for a in OPTS.get("--announce", []):
            if a.split(":")[0] == name:
                size = int(a.split(":")[1])
        self.send_response(302)
        self.send_header("Location", self.path.replace("/resolve/main/", "/", 1).replace("/", "/cdn/", 1))
        self.send_header("X-Linked-Size", str(size))
        self.send_header("X-Linked-Etag", '"%s"' % sha)
        self.send_header("Content-Length", "0")
        self.end_headers()
        return True

    PORTAL = b"<html><body>Sign in to the network to continue</body></html>"

    def portal(self, body):
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.PORTAL)))
        self.end_headers()
        if body:
            self.wfile.write(self.PORTAL)

    def do_HEAD(self):
        self.record()
        path, name = self.target()
        if not path:
            return self.fail(404)
        if name in OPTS.get("--html", []):
            return self.portal(False)
        if name in OPTS.get("--no-size", []):
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
        elif not self.lfs_redirect(path, name):
            self.send_response(200)
            self.send_header("Content-Length", str(os.path.getsize(path)))
            self.end_headers()

    def do_GET(self):
        self.record()
        path, name = self.target()
        if not path:
            return self.fail(404)
        if name in OPTS.get("--html", []):
            return self.portal(True)
        if self.lfs_redirect(path, name):
            return
        if name in OPTS.get("--trickle", []):
            for b in b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nX-Slow: yes\r\n\r\n0123456789":
                self.wfile.write(bytes([b]))
                self.wfile.flush()
                time.sleep(0.5)
            return
        if name in OPTS.get("--endless", []):
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            chunk = b"{" * 65536
            while True:
                self.wfile.write(chunk)
        data = open(path, "rb").read()
        start, rng = 0, self.headers.get("Range")
        if rng and not OPTS.get("--ignore-range"):
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(data):
                return self.fail(416)
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        for cut in OPTS.get("--cut", []):
            f, n = cut.split(":")
            if f == name:
                self.wfile.write(body[:int(n)])
                self.wfile.flush()
                self.close_connection = True
                return
        self.wfile.write(body)


class Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a client that hangs up (a refused checksum, a test's cut) is not news


server = Server(("127.0.0.1", 0), Hub)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()

#!/usr/bin/python3
"""The shell tests' HTTP client (no curl on a bare Debian): one request to a loopback URL,
the body written to OUT, the status code printed. 20 s timeout.

usage: http_get.py URL OUT [--method POST] [--host HOST_HEADER]
"""
import argparse
import re
import sys
import urllib.error
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("url")
ap.add_argument("out")
ap.add_argument("--method", default="GET")
ap.add_argument("--host")
a = ap.parse_args()
if not re.match(r"^http://(127\.0\.0\.1|\[::1\]):\d+/", a.url):
    sys.exit("http_get.py: loopback URLs only, not " + a.url)
req = urllib.request.Request(a.url, method=a.method, data=b"" if a.method == "POST" else None)
if a.host:
    req.add_header("Host", a.host)
try:
    with urllib.request.urlopen(req, timeout=20) as r:
        status, body = r.status, r.read()
except urllib.error.HTTPError as e:
    status, body = e.code, e.read()
with open(a.out, "wb") as f:
    f.write(body)
print(status)

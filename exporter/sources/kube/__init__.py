"""Watching `UnitSignal` resources (platform.md 1) with a list/watch loop of our own.

`config` turns a kubeconfig, the pod's service account or a plain URL into what an aiohttp
client needs; `api` is the only module that knows the API server's HTTP shape; `reflector` keeps a
handler in step with the server (informer semantics) and never reads more than it must.
"""

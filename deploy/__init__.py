"""Kubernetes manifests (kustomize base and overlays) and the generator of their derived parts."""

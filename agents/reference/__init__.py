"""The reference agent: a real ACP agent over stdio that persists its sessions and injects faults on demand."""

"""Every team member as an A2A agent (Agent2Agent protocol, the official ``a2a-sdk``): docs/a2a.md."""

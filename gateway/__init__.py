"""LocalModelGateway (DESIGN §5)."""

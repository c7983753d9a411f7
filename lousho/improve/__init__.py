"""improve: propose, test, apply and roll back edits to an agent's instructions and skills."""

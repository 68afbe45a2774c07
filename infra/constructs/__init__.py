"""One construct per capability, composed by infra.stack."""

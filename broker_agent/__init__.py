"""Broker agent: lifecycle, metadata loader, image/delta, reconciler, agent daemon."""

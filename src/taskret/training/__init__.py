"""Training shared by EPR and TART: one fit loop, configs, encoders and losses."""

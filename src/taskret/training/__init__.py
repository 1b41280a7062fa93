"""Training shared by EPR and TART: one ``train`` entry (``trainer``) over one fit loop (``fit``), with the
configs (``config``), batches (``batching``), encoders (``encoders``) and losses (``losses``) every model uses,
resumable runs (``checkpoints``), and the average of models fine-tuned from one base (``soup``)."""

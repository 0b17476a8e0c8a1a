"""Grammar backends: each turns its input into the shared automata / CFG form."""

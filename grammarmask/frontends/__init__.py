"""Front ends: each turns its user input (labels, a regex, a JSON Schema, Lark or GBNF text) into the
IR (a byte DFA or a :class:`~grammarmask.ir.Cfg`) and hands it to :mod:`grammarmask.engine`."""

"""Schema migrations for both backends (Alembic): every schema change is a revision here.

`runner.upgrade(engine)` brings a database to the newest revision (`courier migrate`,
`courier serve` at start unless told not to, `Store.open`); `runner.check` refuses one that
is not current. There is no alembic.ini: the configuration is built in code (runner.py),
and env.py runs on the connection the runner passes, inside its locked transaction.

Adding a table, column or index (issues 30, 31, 33 and later):
1. Change the model (app/db/*_models.py, or a Core table on `SQLModel.metadata`).
2. Write a revision in versions/, named `rNNNN_what.py`, `down_revision` the current head
   (`runner.head()`). Autogenerate drafts one against a database at head:
       from alembic import command
       from app.db.database import open_engine
       from app.db.migrations import runner
       engine = open_engine(Path("/tmp/draft.db")); runner.upgrade(engine)
       with engine.begin() as conn:
           config = runner._config(conn)
           command.revision(config, "what it adds", autogenerate=True, rev_id="0002")
   Read and trim what it wrote: ALTERs go through `op.batch_alter_table` (on SQLite that
   recreates the table where it must; on PostgreSQL it is a plain ALTER); a dialect's own
   DDL (FTS5, tsvector) is written by hand, under `if op.get_bind().dialect.name == ...`.
3. Never edit a revision that has landed on main: databases in the field are stamped with it.
tests/unit/test_migrations.py compares the models with a database at head on both
backends: a model change without its revision fails there.
"""

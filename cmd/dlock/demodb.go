package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // PostgreSQL, for --db postgres://…
	_ "modernc.org/sqlite"             // SQLite in pure Go, the default
)

// Task states, as the batch service defines them.
const (
	statusPending    = 1
	statusEnqueued   = 2
	statusProcessing = 3
	statusRetry      = 4 // failed, to be retried
	statusFailed     = 5 // failed for good
	statusDone       = 6
)

// taskDB is the demo's task table in SQLite or PostgreSQL.
type taskDB struct {
	db       *sql.DB
	postgres bool
}

// sqliteDSN returns the DSN of a SQLite file shared by several processes:
// WAL lets readers work while one writes, and busy_timeout makes writers
// queue instead of failing.
func sqliteDSN(dir string) string {
	return "file:" + filepath.Join(dir, "tasks.db") +
		"?_pragma=busy_timeout(30000)&_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)"
}

func openTaskDB(dsn string) (*taskDB, error) {
	t := &taskDB{postgres: strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")}
	driver := "sqlite"
	if t.postgres {
		driver = "pgx"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, fail(exitConfig, "open database: %v", err)
	}
	if !t.postgres {
		db.SetMaxOpenConns(1) // one writer per process; processes queue on busy_timeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fail(exitConfig, "open database: %v", err)
	}
	t.db = db
	return t, nil
}

func (t *taskDB) Close() error { return t.db.Close() }

// q rewrites ? placeholders as $1, $2… for PostgreSQL.
func (t *taskDB) q(query string) string {
	if !t.postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (t *taskDB) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := t.db.ExecContext(ctx, t.q(query), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// reset creates the task table afresh with n pending tasks.
func (t *taskDB) reset(ctx context.Context, n int) error {
	stmts := []string{
		`DROP TABLE IF EXISTS dlock_demo_tasks`,
		`CREATE TABLE dlock_demo_tasks (
			id          BIGINT PRIMARY KEY,
			status      INTEGER NOT NULL,
			attempts    INTEGER NOT NULL DEFAULT 0,
			enqueued_at BIGINT NOT NULL DEFAULT 0,
			updated_at  BIGINT NOT NULL DEFAULT 0
		)`,
		`CREATE INDEX dlock_demo_tasks_status ON dlock_demo_tasks (status)`,
	}
	for _, s := range stmts {
		if _, err := t.exec(ctx, s); err != nil {
			return fmt.Errorf("create task table: %w", err)
		}
	}
	tx, err := t.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	now := time.Now().UnixMilli()
	for i := 1; i <= n; i++ {
		if _, err := tx.ExecContext(ctx, t.q(`INSERT INTO dlock_demo_tasks (id, status, updated_at) VALUES (?, ?, ?)`), i, statusPending, now); err != nil {
			return fmt.Errorf("insert tasks: %w", err)
		}
	}
	return tx.Commit()
}

// task is a task as the scheduler sees it: its attempt number tells a
// re-enqueue for a retry apart from a duplicate.
type task struct {
	id       int64
	attempts int
}

// recoverStuck puts tasks back to pending that were marked enqueued longer
// than timeout ago and never taken: their scheduler died between marking
// them and pushing them.
func (t *taskDB) recoverStuck(ctx context.Context, timeout time.Duration) (int64, error) {
	cutoff := time.Now().Add(-timeout).UnixMilli()
	return t.exec(ctx, `UPDATE dlock_demo_tasks SET status = ? WHERE status = ? AND enqueued_at < ?`,
		statusPending, statusEnqueued, cutoff)
}

// due returns up to limit tasks waiting to be enqueued.
func (t *taskDB) due(ctx context.Context, limit int) ([]task, error) {
	rows, err := t.db.QueryContext(ctx, t.q(`SELECT id, attempts FROM dlock_demo_tasks
		WHERE status IN (?, ?) ORDER BY id LIMIT ?`), statusPending, statusRetry, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []task
	for rows.Next() {
		var tk task
		if err := rows.Scan(&tk.id, &tk.attempts); err != nil {
			return nil, err
		}
		out = append(out, tk)
	}
	return out, rows.Err()
}

// markEnqueued records that tasks are about to be pushed to the queue.
func (t *taskDB) markEnqueued(ctx context.Context, tasks []task) error {
	ids := make([]string, len(tasks))
	for i, tk := range tasks {
		ids[i] = strconv.FormatInt(tk.id, 10)
	}
	_, err := t.exec(ctx, `UPDATE dlock_demo_tasks SET status = ?, enqueued_at = ? WHERE id IN (`+strings.Join(ids, ",")+`)`,
		statusEnqueued, time.Now().UnixMilli())
	return err
}

// take moves a task from enqueued to processing; the WHERE on the status
// is the optimistic guard that lets only one consumer have it.
func (t *taskDB) take(ctx context.Context, id int64) (bool, error) {
	n, err := t.exec(ctx, `UPDATE dlock_demo_tasks SET status = ?, attempts = attempts + 1, updated_at = ?
		WHERE id = ? AND status = ?`, statusProcessing, time.Now().UnixMilli(), id, statusEnqueued)
	return n == 1, err
}

func (t *taskDB) finish(ctx context.Context, id int64, status int) error {
	_, err := t.exec(ctx, `UPDATE dlock_demo_tasks SET status = ?, updated_at = ? WHERE id = ?`,
		status, time.Now().UnixMilli(), id)
	return err
}

// counts returns the number of tasks in each status.
func (t *taskDB) counts(ctx context.Context) (map[int]int, error) {
	rows, err := t.db.QueryContext(ctx, `SELECT status, COUNT(*) FROM dlock_demo_tasks GROUP BY status`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int]int{}
	for rows.Next() {
		var s, n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}

package sqlite

import (
	"context"
	"fmt"

	"github.com/keep-run/keep/internal/store/sqldb"
)

// Giving the disk back (issue 44). A prune drops bodies; the pages they
// held go to SQLite's freelist, and the file keeps its size until they
// are handed back. keep.db is made with auto_vacuum=INCREMENTAL (the
// pragma in Open's DSN, which takes effect on a new file), so Compact
// runs PRAGMA incremental_vacuum after each prune: the free pages are cut
// from the end of the file, a short write of its own. A file made before
// (auto_vacuum NONE) is turned once by a VACUUM, which rewrites it whole:
// it holds the writer while it runs (a few seconds per hundred MB) and
// needs free disk the size of the file; afterwards every Compact is
// incremental.

// pageCounts reads the file's pages and free pages and the page size.
func (s *Store) pageCounts(c *conn) (pages, free, size int64, err error) {
	for _, p := range []struct {
		q string
		v *int64
	}{{"PRAGMA page_count", &pages}, {"PRAGMA freelist_count", &free}, {"PRAGMA page_size", &size}} {
		if err := c.c.QueryRowContext(context.Background(), p.q).Scan(p.v); err != nil {
			return 0, 0, 0, fmt.Errorf("%s: %w", p.q, err)
		}
	}
	return pages, free, size, nil
}

// Size is the bytes of the database's pages in use and free (the size
// of keep.db once its WAL is checkpointed).
func (s *Store) Size(ctx context.Context) (int64, error) {
	var out int64
	err := s.onWriter(ctx, func(c *conn) error {
		pages, _, size, err := s.pageCounts(c)
		out = pages * size
		return err
	})
	return out, err
}

// Compact hands the free pages back to the file system and returns the
// bytes the database shrank by.
func (s *Store) Compact(ctx context.Context) (int64, error) {
	var freed int64
	err := s.onWriter(ctx, func(c *conn) error {
		before, _, size, err := s.pageCounts(c)
		if err != nil {
			return err
		}
		var mode int
		if err := c.c.QueryRowContext(ctx, "PRAGMA auto_vacuum").Scan(&mode); err != nil {
			return fmt.Errorf("PRAGMA auto_vacuum: %w", err)
		}
		if mode != 2 { // not INCREMENTAL yet: turned once, by a VACUUM
			for _, q := range []string{"PRAGMA auto_vacuum=INCREMENTAL", "VACUUM"} {
				if _, err := c.c.ExecContext(ctx, q); err != nil {
					return fmt.Errorf("turn keep.db to incremental vacuum (%s): %w", q, err)
				}
			}
		}
		if _, err := c.c.ExecContext(ctx, "PRAGMA incremental_vacuum"); err != nil {
			return fmt.Errorf("PRAGMA incremental_vacuum: %w", err)
		}
		// The shrunk pages are in the WAL; a checkpoint writes them to
		// keep.db and truncates it, so the file itself shrinks now.
		if _, err := c.c.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
			return fmt.Errorf("PRAGMA wal_checkpoint: %w", err)
		}
		after, _, _, err := s.pageCounts(c)
		freed = (before - after) * size
		return err
	})
	return freed, err
}

// onWriter runs fn on the writer connection, outside any transaction,
// once no commit is under way; commits wait meanwhile.
func (s *Store) onWriter(ctx context.Context, fn func(*conn) error) error {
	if s.writer == nil {
		return fmt.Errorf("%w: this copy of the data is open read-only", ErrReadOnly)
	}
	s.mu.Lock()
	for s.leading && !s.closed {
		s.idle.Wait()
	}
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.leading = true
	s.mu.Unlock()
	defer s.giveWriterBack()
	if err := ctx.Err(); err != nil {
		return err
	}
	return fn(s.writer)
}

// Columns lists a table's columns in order (sqldb.RowRewriter): a pruned
// row is rewritten whole, so that the pages its bodies filled are merged.
func (c *conn) Columns(table string) ([]string, error) {
	rows, err := c.Query(`SELECT name FROM pragma_table_info(?) ORDER BY cid`, table)
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", table, err)
	}
	out, err := sqldb.Strings(rows)
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("columns of %s: no such table", table)
	}
	return out, err
}

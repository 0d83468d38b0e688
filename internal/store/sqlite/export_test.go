package sqlite

// HoldReaders takes every reader connection from the pool (as Views busy
// reading would) and returns the function that gives them back.
func (s *Store) HoldReaders() (giveBack func()) {
	var held []*conn
	for i := 0; i < cap(s.readers); i++ {
		held = append(held, <-s.readers)
	}
	return func() {
		for _, c := range held {
			s.readers <- c
		}
	}
}

// Queued is how many Updates wait for the writer.
func (s *Store) Queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

package wal

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// TopicsPage lists, in name order, up to max durable topics whose names start with prefix
// and sort after after ("" for the first page), and reports whether more may follow. The
// order is the wal's own: the 't' keys of Pebble, by name, so a listing of any number of
// topics goes page by page (pass the last name of a page as after), holding neither an
// iterator nor the log's lock between pages and never building the whole list. A topic
// created or deleted between pages is listed or not as its page finds it; every topic that
// exists throughout is listed once. Names are bytes-ordered (as strings.Compare orders them).
func (l *Log) TopicsPage(prefix, after string, max int) (page []TopicInfo, more bool, err error) {
	if max <= 0 {
		max = 256
	}
	db, err := l.readDB()
	if err != nil {
		return nil, false, err
	}
	defer l.db.RUnlock()
	lower := topicKey(prefix)
	if after != "" && after >= prefix {
		lower = append(topicKey(after), 0) // the first name after it
	}
	upper := prefixUpper(topicKey(prefix))
	if upper != nil && bytes.Compare(lower, upper) >= 0 {
		return nil, false, nil // after is past every name with the prefix
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, false, fmt.Errorf("wal: list topics: %w", err)
	}
	// Names first (the iterator is short-lived), then their durable state under one read
	// lock: a 't' key is visible before its batch is durable, and a delete hides a topic
	// from readers before its batch is applied, so the durable table decides.
	names := make([]string, 0, max)
	for ok := it.First(); ok && len(names) < max; ok = it.Next() {
		names = append(names, string(it.Key()[1:]))
	}
	more = it.Valid() && len(names) == max
	if err := it.Close(); err != nil {
		return nil, false, fmt.Errorf("wal: list topics: %w", err)
	}
	page = make([]TopicInfo, 0, len(names))
	l.mu.RLock()
	for _, name := range names {
		if t := l.mu.topics[name]; t != nil {
			page = append(page, t.infoLocked())
		}
	}
	l.mu.RUnlock()
	return page, more, nil
}

// prefixUpper is the least key above every key that starts with p (nil: none).
func prefixUpper(p []byte) []byte {
	u := bytes.Clone(p)
	for i := len(u) - 1; i >= 0; i-- {
		if u[i] < 0xff {
			u[i]++
			return u[:i+1]
		}
	}
	return nil
}

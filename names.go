package dlock

import "github.com/dlock-dev/dlock/internal/keys"

// names returns the names of key's Redis keys (see internal/keys), from the
// Locker's cache if key was used recently.
func (l *Locker) names(key string) *keys.Names { return l.nameCache.Get(key) }

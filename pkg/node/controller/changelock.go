package controller

import "sync"

// ChangeLock is held by whatever changes the running node — a config
// change, an upgrade's install and its reboot, a rollout's turn, a pass of
// the secrets key rotation — so that one never runs beside another. The
// zero value is unlocked and says nothing when it waits.
type ChangeLock struct {
	mu sync.Mutex
	// Say tells the console; nil says nothing.
	Say func(format string, args ...any)
}

// Hold takes the lock for what, saying on the console when it waits for
// another change to end first.
func (l *ChangeLock) Hold(what string) {
	if l.mu.TryLock() {
		return
	}
	if l.Say != nil {
		l.Say("%s waits until the change of the node under way (an upgrade, a rollout's turn or a config change) ends", what)
	}
	l.mu.Lock()
}

// TryLock takes the lock if it is free, and says whether it did.
func (l *ChangeLock) TryLock() bool { return l.mu.TryLock() }

// Unlock lets the lock go.
func (l *ChangeLock) Unlock() { l.mu.Unlock() }

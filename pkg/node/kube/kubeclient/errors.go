package kubeclient

import (
	"errors"
	"fmt"
	"net/http"
)

// Sentinel errors a *StatusError unwraps to, by its status code.
var (
	// ErrNotFound: the object does not exist (404).
	ErrNotFound = errors.New("not found")
	// ErrConflict: the object changed since it was read, or already
	// exists (409): read it again and decide again.
	ErrConflict = errors.New("conflict")
	// ErrTooManyRequests: the API refused for now (429); for an
	// eviction, a PodDisruptionBudget does not allow it yet.
	ErrTooManyRequests = errors.New("too many requests")
	// ErrGone: a watch's resource version is too old (410): list again.
	ErrGone = errors.New("resource version too old")
)

// StatusError is an API answer other than success.
type StatusError struct {
	Method, URL string
	Code        int
	Status      string
	// Body is the start of the answer (the API's Status object).
	Body string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %s: %s", e.Method, e.URL, e.Status, e.Body)
}

// Unwrap lets errors.Is match ErrNotFound, ErrConflict and
// ErrTooManyRequests.
func (e *StatusError) Unwrap() error {
	switch e.Code {
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusConflict:
		return ErrConflict
	case http.StatusTooManyRequests:
		return ErrTooManyRequests
	case http.StatusGone:
		return ErrGone
	}
	return nil
}

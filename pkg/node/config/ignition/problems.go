package ignition

import (
	"fmt"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
)

// problems collects what Check or Verify finds, at the config's JSON
// paths, as the ignitionspec.Problems that Parse's errors are too.
type problems struct {
	list ignitionspec.Problems
}

func (ps *problems) add(kind error, at, format string, args ...any) {
	ps.list = append(ps.list, ignitionspec.Problem{Path: at, Message: fmt.Sprintf(format, args...), Err: kind})
}

// err is the problems as an error, nil when there are none.
func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	return ps.list
}

// field appends a key to a JSON path.
func field(at, key string) string { return at + "." + key }

// index appends an index to a JSON path.
func index(at string, i int) string { return fmt.Sprintf("%s[%d]", at, i) }

func isTrue(b *bool) bool { return b != nil && *b }

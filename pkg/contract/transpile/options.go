package transpile

import "errors"

// Option sets an optional input of Translate.
type Option func(*options) error

type options struct {
	// filesDir is where a Butane config's local: files and trees are
	// read; "" refuses them.
	filesDir string
}

// WithFilesDir lets a Butane config embed files (contents.local,
// storage.trees, contents_local of units) from dir, as butane's
// --files-dir does; without it they are refused.
func WithFilesDir(dir string) Option {
	return func(o *options) error {
		if dir == "" {
			return errors.New("files directory: empty path")
		}
		o.filesDir = dir
		return nil
	}
}

func makeOptions(opts []Option) (*options, error) {
	o := &options{}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	return o, nil
}

package signature

import "errors"

// Errors Verify returns, wrapped with the detail of what was found: test
// for them with errors.Is.
var (
	// ErrMalformed means the signature file is not one Sign writes: cut
	// short, a wrong header, bad base64, a key or signature of the wrong
	// length, or larger than MaxFileSize.
	ErrMalformed = errors.New("the signature file is malformed (cut short, edited, or not a signature); " +
		"make a new one with `imagebuild config sign`")
	// ErrUnknownKey means the signature was made by a key not among the
	// trusted ones; the error names the key by its ID.
	ErrUnknownKey = errors.New("the config is signed by a key this node does not trust; " +
		"sign it with `imagebuild config sign --key` and a key listed in trustedKeys " +
		"of the node's current config (a cluster's key is in its secrets file)")
	// ErrBadSignature means the signature does not match the data: it was
	// made over another file, or the file or the signature was changed
	// after signing.
	ErrBadSignature = errors.New("the signature does not match this config " +
		"(it was made for another file, or the file was changed after signing); " +
		"sign this exact file again with `imagebuild config sign`")
)

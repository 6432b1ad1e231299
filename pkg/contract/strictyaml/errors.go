package strictyaml

import "errors"

// ErrInvalidTarget is returned by Unmarshal when out is not a non-nil pointer.
// It signals a programming error, not a problem with the document.
var ErrInvalidTarget = errors.New("strictyaml: Unmarshal needs a non-nil pointer")

package registry
import (
 _ "github.com/google/go-containerregistry/pkg/v1/remote"
 _ "github.com/google/go-containerregistry/pkg/v1/layout"
 _ "github.com/google/go-containerregistry/pkg/v1/random"
 _ "github.com/google/go-containerregistry/pkg/v1/validate"
 _ "github.com/google/go-containerregistry/pkg/v1/mutate"
 _ "github.com/google/go-containerregistry/pkg/name"
)

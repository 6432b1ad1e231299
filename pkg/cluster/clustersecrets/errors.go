package clustersecrets

import "errors"

// ErrNoSigningKey means the secrets have no config signing key: they were
// made before Terrarium signed configs.
var ErrNoSigningKey = errors.New("the cluster secrets have no config signing key (they predate it); " +
	"run `imagebuild config cluster` with this secrets file once: it adds one and saves it")

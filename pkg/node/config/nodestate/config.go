package nodestate

import "fmt"

// MaxConfigSize bounds the stored machine config, stored and read: far
// above what a config source offers (1 MiB).
const MaxConfigSize = 4 << 20

// ReadConfig reads the stored machine config (ConfigFile): the document
// machineconfig.Parse reads, under ConfigFile's name. It is kept as YAML,
// and parsed by its owner, so that the initramfs, which reads STATE's
// other files here, carries no YAML parser.
func (s Files) ReadConfig() ([]byte, error) {
	b, err := s.read(ConfigFile, MaxConfigSize)
	if err != nil {
		return nil, fmt.Errorf("read the stored config: %w", err)
	}
	return b, nil
}

// StoreConfig makes data the stored machine config: 0600 (it may carry the
// cluster's keys), on disk when it returns, so that the journal may name
// it.
func (s Files) StoreConfig(data []byte) error {
	if len(data) > MaxConfigSize {
		return fmt.Errorf("store the node config: %w: %d bytes, at most %d", ErrTooLarge, len(data), MaxConfigSize)
	}
	if err := s.write(ConfigFile, data, 0o600); err != nil {
		return fmt.Errorf("store the node config: %w", err)
	}
	return nil
}

package kubeclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// secretsPage is how many Secrets one list call returns.
const secretsPage = 100

// RewriteSecrets writes every Secret of every namespace back unchanged,
// so that kube-apiserver stores each again with the key it now writes
// with (the Kubernetes documentation's `kubectl get secrets -A -o json |
// kubectl replace -f -`), a page at a time, and returns how many it
// rewrote. A Secret deleted since the list, or changed since (a conflict:
// whoever changed it stored it with the same key), is left: it needs no
// rewrite. progress, when not nil, is called after each page.
func (c *Client) RewriteSecrets(ctx context.Context, progress func(rewritten int)) (int, error) {
	type item struct {
		Metadata struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"metadata"`
	}
	var (
		n    int
		cont string
	)
	for {
		q := url.Values{"limit": {strconv.Itoa(secretsPage)}}
		if cont != "" {
			q.Set("continue", cont)
		}
		var list struct {
			Metadata struct {
				Continue string `json:"continue"`
			} `json:"metadata"`
			Items []json.RawMessage `json:"items"`
		}
		if err := c.send(ctx, request{method: http.MethodGet, path: "/api/v1/secrets", query: q}, &list); err != nil {
			return n, fmt.Errorf("list the Secrets: %w", err)
		}
		for _, raw := range list.Items {
			var it item
			if err := json.Unmarshal(raw, &it); err != nil {
				return n, fmt.Errorf("list the Secrets: %w", err)
			}
			path := "/api/v1/namespaces/" + url.PathEscape(it.Metadata.Namespace) + "/secrets/" + url.PathEscape(it.Metadata.Name)
			err := c.send(ctx, request{method: http.MethodPut, path: path, body: raw}, nil)
			switch {
			case err == nil:
				n++
			case errors.Is(err, ErrNotFound), errors.Is(err, ErrConflict):
			default:
				return n, fmt.Errorf("rewrite Secret %s/%s: %w", it.Metadata.Namespace, it.Metadata.Name, err)
			}
		}
		if progress != nil {
			progress(n)
		}
		if cont = list.Metadata.Continue; cont == "" {
			return n, nil
		}
	}
}

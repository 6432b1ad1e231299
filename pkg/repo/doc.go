// Package repo holds tests of the repository as a whole, such as the
// README's layout table checked against the tree. It has no code.
package repo

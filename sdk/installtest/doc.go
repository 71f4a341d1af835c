// Package installtest installs each SDK the way its doc tells a user to, into
// a scratch project outside this repository, and runs a small producer and
// worker built against it with a real spoold (built from this repository)
// and a real redis-server: the path a new user takes, tested.
//
//   - Go (go_test.go): a module made with `go mod init` that requires
//     github.com/spoolmq/spool/sdk/go through replace directives to this
//     checkout (docs/sdk-go.md, "Install"); its module graph must hold none
//     of the server's dependencies.
//   - Java (java_test.go): the jar built by `mvn -f sdk/java install`,
//     installed into a scratch local Maven repository, and a consumer project
//     whose pom is docs/sdk-java.md's.
//
// Each language runs when SPOOL_INSTALL_LANGS names it (make test-sdk-go and
// make test-sdk-java set it); otherwise its test skips, saying so.
package installtest

package api

import _ "embed"

// OpenAPI is the OpenAPI 3.0.3 description of the run API (openapi.yaml): the same
// contract as API.md and the types of this package, in a form that tools can check.
// The service serves it as is, and internal/apitest validates every exchange of the
// tests against it so that the document can never drift from the server.
//
//go:embed openapi.yaml
var OpenAPI []byte

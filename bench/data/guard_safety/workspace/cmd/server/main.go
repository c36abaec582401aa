package main

import (
	"log/slog"
	"net/http"
)

func main() {
	slog.Info("starting")
	http.ListenAndServe(":8080", nil)
}

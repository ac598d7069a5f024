package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/brig-sandbox/brig/client"
)

// systemd's notification protocol (sd_notify(3)), for a unit of Type=notify
// (deploy/brig.service): READY=1 once the socket listens, so that units
// ordered after brig and `systemctl start` wait for a service that serves,
// not one still reading its config; STOPPING=1 when a stop begins; and,
// under WatchdogSec=, WATCHDOG=1 while the service answers on its socket.
// Outside systemd (no NOTIFY_SOCKET) each is a no-op.

// notifySystemd sends state to the service manager, when there is one. A
// failure is logged and otherwise ignored: the protocol is an aid to the
// manager, never a condition of serving.
func notifySystemd(log *slog.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warn("telling systemd the service's state", "state", state, "err", err)
	}
}

// watchdog pings systemd's watchdog until ctx ends, when the unit asks for
// one (WATCHDOG_USEC), at half its interval, and only while GET /v1/health
// on socket gets an answer within that half: a service that is stopped
// (SIGSTOP, a debugger) or wedged then misses its pings, and systemd kills it
// (WatchdogSignal=, then SIGKILL) and restarts it. What a dead service's
// sandboxes do then is bounded (their pid 1 dies with it; README, The
// service), where a stopped one's runs outlive their time limits. Any answer
// counts, a 403 of a peer list without root or the "draining" of a stop too:
// the probe asks whether the service's socket is served, not whether runs
// may be sent.
func watchdog(ctx context.Context, socket string, failing func() bool, log *slog.Logger) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("systemd's watchdog settings are unreadable; no pings are sent", "err", err)
		return
	}
	if interval <= 0 {
		return
	}
	every := interval / 2
	// Each probe dials afresh: a kept connection would be answered by a
	// service whose socket no longer accepts.
	c := client.New(socket)
	c.HTTP.Transport.(*http.Transport).DisableKeepAlives = true
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		probe, cancel := context.WithTimeout(ctx, every)
		_, err := c.Health(probe)
		cancel()
		if failing() {
			// Its journal is lost: only a restart mends it, which the
			// watchdog's end brings (Restart=). Asked of the service
			// itself, not its health: a service that refuses root answers
			// the probe 403 (the review of 2026-12-06).
			if ctx.Err() == nil {
				log.Error("the service is failing (its journal is lost); systemd's watchdog is not pinged, so that systemd restarts it", "watchdog", interval.String())
			}
		} else if err == nil || answered(err) {
			notifySystemd(log, daemon.SdNotifyWatchdog)
		} else if ctx.Err() == nil {
			log.Warn("the service's own health probe failed; systemd's watchdog is not pinged", "err", err, "watchdog", interval.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// answered reports whether err is the service's own answer (an HTTP status),
// not a failure to reach it.
func answered(err error) bool {
	var apiErr *client.Error
	return errors.As(err, &apiErr)
}

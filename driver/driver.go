// Package driver is what a Redis client other than go-redis implements for
// dlock to keep its locks there ([github.com/dlockio/dlock.NewFrom]): send
// a command once, send a few to one server in one write, listen on pub/sub,
// and list a Cluster's masters. extra/dlockrueidis, extra/dlockvalkey and
// extra/dlockredigo implement it; package drivertest holds the tests every
// implementation must pass.
//
// A command is a list of arguments: string, *string, []byte, int or int64
// ([String] gives each its wire form). dlock sends these commands: EVALSHA
// and EVAL (keys after the key count), SCRIPT LOAD, GET, TYPE, ZRANGE, SET
// and DEL (key first), SCAN, PING ([Keys] names the keys of each, for a
// Cluster's routing).
package driver

import (
	"context"
	"errors"
	"strconv"
	"strings"
)

// Conn is one Redis deployment: a server, a Sentinel-managed master, or a
// Cluster. Its methods are safe for concurrent use.
type Conn interface {
	// Do sends one command and returns its reply: nil, int64, string, or
	// []any of these; a server's error reply as an [Error]. The command is
	// sent once: never again after a failure that may have left it
	// running (a lock's clean lease relies on it). A failure to connect
	// wraps a *net.OpError whose Op is "dial"; a reply lost to a broken or
	// timed-out connection wraps io.EOF or a net.Error; a closed client
	// returns [ErrClosed]; a command refused before it was sent (an
	// argument it cannot send) wraps [ErrNotSent]. It should end with
	// ctx; where the client makes it wait longer (for a dial another
	// command started), dlock leaves it when ctx ends, for a while after
	// a call failed without a reply.
	Do(ctx context.Context, args ...any) (any, error)
	// DoMulti sends cmds, each once, in one write on one connection to
	// one server, and returns their replies in order. dlock calls it only
	// on a Conn that is one server: never on a Cluster's, only on the
	// masters' Conns that Masters returns.
	DoMulti(ctx context.Context, cmds ...[]any) []Result
	// PubSub opens a pub/sub connection and returns it subscribed to
	// nothing. With channel "" it is a connection to the server (or a
	// Sentinel-managed master) and will be used with SUBSCRIBE; otherwise it
	// is a Cluster's connection to the shard that owns channel's slot, used
	// with SSUBSCRIBE for channels of that slot. It may wait on the network,
	// bounded by ctx.
	PubSub(ctx context.Context, channel string) (PubSub, error)
	// Masters returns a Conn for each master of a Cluster, each one
	// server; or, for any other deployment, the Conn itself.
	Masters(ctx context.Context) ([]Conn, error)
	// Info describes the deployment and the client's configuration.
	Info() Info
}

// Info describes a Conn.
type Info struct {
	// Cluster reports a Redis Cluster: releases are announced with
	// SPUBLISH and listened to with sharded pub/sub.
	Cluster bool
	// NoRetry reports that the client is configured never to send a
	// command again (go-redis: MaxRetries < 0, and for a Cluster client
	// MaxRedirects < 0 too): dlock then does not ask
	// again after a lost reply either. Otherwise it asks once more, where
	// that is safe (the client itself must not: see Conn.Do).
	NoRetry bool
}

// Result is the reply of one command of DoMulti, as Do returns it.
type Result struct {
	Val any
	Err error
}

// PubSub is one pub/sub connection. It does not reconnect: once it
// broke (or was closed), every method fails and dlock opens another.
// dlock calls Receive from one goroutine and the other methods from
// another (never two at once), and calls Receive only once the first
// Subscribe returned; Close may be called at any time, from any
// goroutine, and makes a Receive in progress return.
type PubSub interface {
	// Subscribe and Unsubscribe send the command (SUBSCRIBE or
	// SSUBSCRIBE…) and return once it is written; its confirmations
	// arrive through Receive.
	Subscribe(ctx context.Context, channels ...string) error
	Unsubscribe(ctx context.Context, channels ...string) error
	// Receive returns the next message or confirmation. Its error wraps
	// ctx.Err() when ctx ended first (the connection is still good), and
	// otherwise means the connection is done (broken, or closed:
	// ErrClosed).
	Receive(ctx context.Context) (Message, error)
	// Ping sends a PING. Its reply must arrive through Receive as a
	// Message of Kind "pong" (a client that reads the reply itself
	// passes one on): a connection on which nothing arrives for 10 s
	// after a PING is ended at its next silence.
	Ping(ctx context.Context) error
	Close() error
}

// Message is what a PubSub received: a message, or a confirmation.
type Message struct {
	// Kind is "message" (or "smessage"), or a confirmation: "subscribe",
	// "ssubscribe", "unsubscribe", "sunsubscribe" (one that dlock did not
	// ask for, on a sharded connection, makes it connect again); dlock
	// ignores any other.
	Kind    string
	Channel string
	Payload string // a message's
}

// Error is a server's error reply, such as "NOSCRIPT No matching script".
type Error string

func (e Error) Error() string { return string(e) }

// RedisError marks e as a reply of the server, not a failure to reach it.
func (Error) RedisError() {}

// ErrClosed is returned by a Conn or PubSub that was closed. It is
// dlock.ErrClosed: a call through a closed client fails as one after the
// Client's Close.
var ErrClosed = errors.New("dlock: client closed")

// ErrNotSent is wrapped by the error of a command that a Conn refused
// before sending it: Redis never saw it, and dlock does not take it for a
// lost reply.
var ErrNotSent = errors.New("not sent")

// String returns the wire form of a command argument (see the package
// doc); ok is false for a type dlock never sends.
func String(arg any) (s string, ok bool) {
	switch v := arg.(type) {
	case string:
		return v, true
	case *string:
		return *v, true
	case []byte:
		return string(v), true
	case int:
		return strconv.Itoa(v), true
	case int64:
		return strconv.FormatInt(v, 10), true
	}
	return "", false
}

// Keys returns the keys of the command args (see the package doc), in their
// wire form: what a Cluster routes it by. Commands with none return nil.
func Keys(args []any) []string {
	if len(args) < 2 {
		return nil
	}
	name, _ := String(args[0])
	switch strings.ToLower(name) {
	case "evalsha", "eval", "evalsha_ro", "eval_ro":
		if len(args) < 3 {
			return nil
		}
		s, _ := String(args[2])
		n, _ := strconv.Atoi(s)
		if n <= 0 || 3+n > len(args) {
			return nil
		}
		keys := make([]string, n)
		for i := range n {
			keys[i], _ = String(args[3+i])
		}
		return keys
	case "get", "type", "zrange", "mget", "exists", "pttl", "hmget", "set", "del":
		k, _ := String(args[1])
		return []string{k}
	}
	return nil
}

#!/usr/bin/env bash
# The layer rule of src/ (ARCHITECTURE.md, "Code map"), checked over `crate::` paths:
#
#   infra/      may name crate::infra only
#   runtime/    may name crate::infra and crate::runtime
#   <capability>/  (every other folder or file: wallet/, affiliate/, bill/, …)
#               may name crate::infra, crate::runtime and itself — never another
#               capability (what two capabilities share belongs in a lower layer)
#   server/, main.rs, lib.rs, cli/   the composition root: anything
#
# A path is read wherever it stands in code: `use crate::x::…`, `crate::x::f()`, and
# the first names inside `use crate::{x::…, y::…}`. Comment lines are skipped. Exits 1
# and names each offending file:line when a path runs up or sideways.
#
#   tools/check-layers.sh              check this checkout's src/
#   tools/check-layers.sh --self-test  plant an upward, a sideways and a grouped import
#                                      in a copy of src/ and require each to be caught
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--self-test" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  plant() {
    rm -rf "$tmp/src" && cp -r src "$tmp/src"
    printf '%s\n' "$2" >>"$tmp/src/$1"
    if (cd "$tmp" && bash "$OLDPWD/tools/check-layers.sh" --dir "$tmp") >/dev/null; then
      echo "check-layers self-test: not caught: '$2' in src/$1" >&2
      exit 1
    fi
  }
  plant infra/db.rs 'use crate::wallet::api;'
  plant infra/db.rs 'use crate::runtime::bus::CommandBus;'
  plant runtime/unit.rs 'fn f() { crate::bill::commands::x(); }'
  plant bill/commands.rs 'use crate::{infra::db::Db, affiliate::ingest};'
  (bash tools/check-layers.sh --dir "$PWD" >/dev/null) ||
    { echo "check-layers self-test: the clean tree failed" >&2; exit 1; }
  echo "check-layers self-test: 4 planted imports caught, the clean tree passes"
  exit 0
fi
if [ "${1:-}" = "--dir" ]; then
  cd "$2"
fi

perl -e '
use strict;
use warnings;
my %root = map { $_ => 1 } qw(server main lib cli);
my $bad = 0;
my $files = 0;
sub owner {
    my ($path) = @_;
    $path =~ s{^src/}{};
    my ($top) = split m{/}, $path;
    $top =~ s/\.rs$//;
    return $top;
}
sub allowed {
    my ($from, $to) = @_;
    return 1 if $root{$from};
    return $to eq "infra" if $from eq "infra";
    return ($to eq "infra" || $to eq "runtime") if $from eq "runtime";
    return ($to eq "infra" || $to eq "runtime" || $to eq $from);
}
open(my $list, "-|", "find", "src", "-name", "*.rs") or die "find: $!";
while (my $file = <$list>) {
    chomp $file;
    $files++;
    my $from = owner($file);
    open(my $fh, "<", $file) or die "$file: $!";
    my $text = do { local $/; <$fh> };
    close $fh;
    my @lines = split /\n/, $text, -1;
    my $joined = "";
    my @line_of;    # offset in $joined -> line number
    for my $i (0 .. $#lines) {
        my $l = $lines[$i];
        $l = "" if $l =~ m{^\s*//};
        $line_of[length($joined)] = $i + 1;
        $joined .= $l . "\n";
    }
    my $line_at = sub {
        my ($off) = @_;
        while ($off > 0 && !defined $line_of[$off]) { $off-- }
        return $line_of[$off] // 1;
    };
    my @hits;
    while ($joined =~ /(?<![\$\w])crate::([A-Za-z_]\w*)/g) {
        push @hits, [$1, $-[0]];
    }
    while ($joined =~ /(?<![\$\w])crate::\{/g) {
        my $start = $+[0];
        my ($depth, $i, $item, @tops) = (1, $start, "", ());
        while ($depth > 0 && $i < length $joined) {
            my $c = substr($joined, $i++, 1);
            if ($c eq "{") { $depth++ }
            elsif ($c eq "}") { $depth-- }
            if ($depth == 1 && $c eq ",") { push @tops, $item; $item = ""; next }
            $item .= $c if $depth >= 1;
        }
        push @tops, $item;
        for my $t (@tops) {
            push @hits, [$1, $start] if $t =~ /^\s*([A-Za-z_]\w*)/;
        }
    }
    for my $h (@hits) {
        my ($to, $off) = @$h;
        next if $to eq "self";
        next if allowed($from, $to);
        printf "%s:%d: %s imports crate::%s (the layer rule: infra <- runtime <- capability; capabilities do not import each other)\n",
            $file, $line_at->($off), $from, $to;
        $bad++;
    }
}
if ($bad) {
    print "check-layers: $bad import(s) break the layer rule\n";
    exit 1;
}
print "check-layers: $files files, every crate:: import runs down\n";
'

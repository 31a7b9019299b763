"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op


revision: str = '0001'
down_revision: str | None = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('api_tokens',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('kind', 'name'),
    sa.UniqueConstraint('token_hash')
    )
    op.create_table('imported_results',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('commit', sa.String(length=40), nullable=False),
    sa.Column('val_bpb', sa.Float(), nullable=False),
    sa.Column('memory_gb', sa.Float(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.Column('imported_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    project = op.create_table('project',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('harness_id', sa.String(length=128), nullable=True),
    sa.Column('platform', sa.String(length=200), nullable=True),
    sa.Column('baseline_commit', sa.String(length=40), nullable=True),
    sa.Column('best_commit', sa.String(length=40), nullable=True),
    sa.Column('best_experiment_id', sa.Integer(), nullable=True),
    sa.Column('best_val_bpb', sa.Float(), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    # The single project row that pins the harness id, platform and best commit.
    op.bulk_insert(project, [{"id": 1, "updated_at": datetime.now(UTC)}])
    op.create_table('experiments',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('agent_id', sa.Integer(), nullable=True),
    sa.Column('source', sa.String(length=16), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.Column('hypothesis', sa.Text(), nullable=True),
    sa.Column('base_commit', sa.String(length=40), nullable=True),
    sa.Column('commit_sha', sa.String(length=40), nullable=False),
    sa.Column('train_py_blob', sa.String(length=40), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('cancel_requested', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('queued_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('decision', sa.String(length=16), nullable=True),
    sa.Column('decision_reason', sa.Text(), nullable=True),
    sa.Column('best_before_commit', sa.String(length=40), nullable=True),
    sa.Column('best_before_val_bpb', sa.Float(), nullable=True),
    sa.Column('rebased_from_id', sa.Integer(), nullable=True),
    sa.Column('rebased_to_id', sa.Integer(), nullable=True),
    sa.Column('val_bpb', sa.Float(), nullable=True),
    sa.Column('platform', sa.String(length=200), nullable=True),
    sa.ForeignKeyConstraint(['agent_id'], ['api_tokens.id'], ),
    sa.ForeignKeyConstraint(['rebased_from_id'], ['experiments.id'], ),
    sa.ForeignKeyConstraint(['rebased_to_id'], ['experiments.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('experiments', schema=None) as batch_op:
        batch_op.create_index('ix_experiments_agent', ['agent_id', 'id'], unique=False)
        batch_op.create_index('ix_experiments_base', ['base_commit', 'id'], unique=False)
        batch_op.create_index('ix_experiments_blob', ['train_py_blob'], unique=False)
        batch_op.create_index('ix_experiments_bpb', ['val_bpb'], unique=False)
        batch_op.create_index('ix_experiments_commit', ['commit_sha'], unique=False)
        batch_op.create_index('ix_experiments_queue', ['status', 'queued_at', 'id'], unique=False)

    op.create_table('workers',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('token_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('device', sa.String(length=200), nullable=False),
    sa.Column('memory_gb', sa.Float(), nullable=False),
    sa.Column('harness_id', sa.String(length=128), nullable=False),
    sa.Column('registered_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_seen_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['token_id'], ['api_tokens.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('token_id', 'name')
    )
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_workers_last_seen_at'), ['last_seen_at'], unique=False)

    op.create_table('idempotency_keys',
    sa.Column('token_id', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=200), nullable=False),
    sa.Column('request_sha256', sa.String(length=64), nullable=False),
    sa.Column('experiment_id', sa.Integer(), nullable=False),
    sa.Column('status_code', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['experiment_id'], ['experiments.id'], ),
    sa.ForeignKeyConstraint(['token_id'], ['api_tokens.id'], ),
    sa.PrimaryKeyConstraint('token_id', 'key')
    )
    op.create_table('leases',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('experiment_id', sa.Integer(), nullable=False),
    sa.Column('worker_id', sa.String(length=36), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('claimed_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['experiment_id'], ['experiments.id'], ),
    sa.ForeignKeyConstraint(['worker_id'], ['workers.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.create_index('ix_leases_active', ['state', 'expires_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_leases_experiment_id'), ['experiment_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_leases_worker_id'), ['worker_id'], unique=False)

    op.create_table('progress_events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('experiment_id', sa.Integer(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('step', sa.BigInteger(), nullable=False),
    sa.Column('loss', sa.Float(), nullable=True),
    sa.Column('tokens_per_s', sa.Float(), nullable=True),
    sa.Column('fraction', sa.Float(), nullable=False),
    sa.Column('phase', sa.String(length=16), nullable=False),
    sa.Column('elapsed_s', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['experiment_id'], ['experiments.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('progress_events', schema=None) as batch_op:
        batch_op.create_index('ix_progress_experiment', ['experiment_id', 'id'], unique=False)

    op.create_table('results',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('experiment_id', sa.Integer(), nullable=False),
    sa.Column('lease_id', sa.String(length=36), nullable=False),
    sa.Column('worker_id', sa.String(length=36), nullable=False),
    sa.Column('received_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('error_class', sa.String(length=32), nullable=True),
    sa.Column('error_message', sa.Text(), nullable=True),
    sa.Column('val_bpb', sa.Float(), nullable=True),
    sa.Column('training_seconds', sa.Float(), nullable=True),
    sa.Column('startup_seconds', sa.Float(), nullable=True),
    sa.Column('score_seconds', sa.Float(), nullable=True),
    sa.Column('total_seconds', sa.Float(), nullable=True),
    sa.Column('peak_memory_mb', sa.Float(), nullable=True),
    sa.Column('tokens', sa.BigInteger(), nullable=True),
    sa.Column('steps', sa.BigInteger(), nullable=True),
    sa.Column('num_params', sa.BigInteger(), nullable=True),
    sa.Column('mfu_percent', sa.Float(), nullable=True),
    sa.Column('device', sa.String(length=200), nullable=False),
    sa.Column('harness_id', sa.String(length=128), nullable=False),
    sa.Column('sandbox', sa.Boolean(), nullable=False),
    sa.Column('log_tail', sa.Text(), nullable=False),
    sa.Column('extra', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['experiment_id'], ['experiments.id'], ),
    sa.ForeignKeyConstraint(['lease_id'], ['leases.id'], ),
    sa.ForeignKeyConstraint(['worker_id'], ['workers.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('experiment_id')
    )


def downgrade() -> None:
    op.drop_table('results')
    with op.batch_alter_table('progress_events', schema=None) as batch_op:
        batch_op.drop_index('ix_progress_experiment')

    op.drop_table('progress_events')
    with op.batch_alter_table('leases', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_leases_worker_id'))
        batch_op.drop_index(batch_op.f('ix_leases_experiment_id'))
        batch_op.drop_index('ix_leases_active')

    op.drop_table('leases')
    op.drop_table('idempotency_keys')
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_workers_last_seen_at'))

    op.drop_table('workers')
    with op.batch_alter_table('experiments', schema=None) as batch_op:
        batch_op.drop_index('ix_experiments_queue')
        batch_op.drop_index('ix_experiments_commit')
        batch_op.drop_index('ix_experiments_bpb')
        batch_op.drop_index('ix_experiments_blob')
        batch_op.drop_index('ix_experiments_base')
        batch_op.drop_index('ix_experiments_agent')

    op.drop_table('experiments')
    op.drop_table('project')
    op.drop_table('imported_results')
    op.drop_table('api_tokens')
